"""The Volcano hooks' calls, written once: each call's request and what its answer means.

Pure. ``VolcanoHook`` (sync) and ``AsyncVolcanoHook`` only send these over their own client
(docs/architecture.md says why there are two), so the two can never ask differently.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, overload

GROUP = "batch.volcano.sh"
VERSION = "v1alpha1"
PLURAL = "jobs"
JOBS_RESOURCE = f"{PLURAL}.{GROUP}"  # as RBAC and error messages name it
PODGROUP_GROUP = "scheduling.volcano.sh"
PODGROUP_VERSION = "v1beta1"
JOB_NAME_LABEL = "volcano.sh/job-name"
QUEUE_RESOURCE = f"queues.{PODGROUP_GROUP}"

#: A GET that answers 404: there is no object (job, queue) of that name.
ABSENT = frozenset({404})
#: A DELETE of a job that answers 404 (gone already) or 409 (a precondition failed: another
#: submission holds the name, or the job changed since it was read) deleted nothing.
NOT_DELETED = frozenset({404, 409})
#: A PATCH of a job's annotations that answers 404 (gone) or 422 (the uid guard failed:
#: another submission holds the name now) changed nothing.
NOT_PATCHED = frozenset({404, 422})


@overload
def job_args(namespace: str) -> tuple[str, str, str, str]: ...
@overload
def job_args(namespace: str, name: str) -> tuple[str, str, str, str, str]: ...
def job_args(namespace: str, name: str | None = None) -> tuple[str, ...]:
    """The leading arguments of a ``*_namespaced_custom_object`` call on Volcano jobs: group,
    version, namespace, plural, and the job's name for a call on one job."""
    head = (GROUP, VERSION, namespace, PLURAL)
    return head if name is None else (*head, name)


def job_pods_selector(name: str) -> str:
    """The label selector of a job's pods (Volcano labels each with its job's name)."""
    return f"{JOB_NAME_LABEL}={name}"


def delete_job_body(uid: str | None, resource_version: str | None) -> dict[str, Any]:
    """The delete options of a job: foreground (gone only once its pods are), and only this
    submission (``uid``) as last read (``resource_version``) when given."""
    body: dict[str, Any] = {"propagationPolicy": "Foreground"}
    preconditions = {
        key: value
        for key, value in (("uid", uid), ("resourceVersion", resource_version))
        if value is not None
    }
    if uid or resource_version:
        body["preconditions"] = preconditions
    return body


def uid_guarded_merge_patch(uid: str, annotations: Mapping[str, str]) -> dict[str, Any]:
    """A merge patch that sets ``annotations`` on the submission ``uid`` alone: it carries the
    uid, which the apiserver refuses to change (422), so a job recreated under the name is
    never touched. The sync hook's shape: the kubernetes client 32 of Airflow 3.0 cannot send
    a JSON patch to a custom object."""
    return {"metadata": {"uid": uid, "annotations": dict(annotations)}}


def uid_tested_json_patch(job: Mapping[str, Any], annotations: Mapping[str, str]) -> list[dict]:
    """A JSON patch that adds ``annotations`` to this submission of ``job``: its first op tests
    the uid (a failed test answers 422). The async hook's shape: its client sends a list body
    as ``application/json-patch+json`` on every supported release, where a merge patch would
    need ``_content_type``, which older clients lack."""
    metadata = job["metadata"]
    ops: list[dict] = [{"op": "test", "path": "/metadata/uid", "value": metadata["uid"]}]
    if metadata.get("annotations"):
        ops += [
            {"op": "add", "path": f"/metadata/annotations/{_pointer(key)}", "value": value}
            for key, value in annotations.items()
        ]
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": dict(annotations)})
    return ops


def _pointer(key: str) -> str:
    """``key`` as one JSON Pointer segment (RFC 6901): annotation keys hold ``/``."""
    return key.replace("~", "~0").replace("/", "~1")


def log_since_query(container: str, since: int) -> dict[str, Any]:
    """The query of a stall probe: the first byte a container logged in the last ``since``
    seconds (``""`` when it printed nothing then)."""
    return {"container": container, "since_seconds": since, "limit_bytes": 1}


def log_text(data: bytes) -> str:
    """A log's raw bytes as text. Decoded here, not by the client: kubernetes 36 returns the
    repr of the bytes (``"b'...'"``) when it decodes a log itself
    (kubernetes-client/python#2596)."""
    return data.decode("utf-8", errors="replace")


def items(answer: Mapping[str, Any]) -> list[dict]:
    """The objects of a LIST's answer."""
    return list(answer.get("items") or [])


def list_page(answer: Mapping[str, Any]) -> tuple[list[dict], str, str | None]:
    """One page of a LIST (of jobs, or pods): its items, the list's resourceVersion (to watch
    from once every page is in) and the next page's token (``None`` on the last page)."""
    metadata = answer.get("metadata") or {}
    return items(answer), metadata["resourceVersion"], metadata.get("continue") or None


def owned_by(objects: Iterable[Mapping[str, Any]], owner_uid: str) -> list:
    """The objects one of whose owner references is ``owner_uid`` (a job's PodGroups)."""
    return [
        obj
        for obj in objects
        if any(
            ref.get("uid") == owner_uid
            for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
        )
    ]

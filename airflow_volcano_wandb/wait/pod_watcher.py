"""One watch of a namespace's pods of managed jobs, shared by every trigger in an event loop.

A running job's wait reads its pods (for ``judge.judge_pods``, the stall timeout and the
master-log follow). One LIST per job per ``pod_check_interval`` is about 2,000 requests a minute
at 1,000 running jobs; one list+watch (``namespace_watch``) of the pods this provider's jobs
label as theirs (``app.kubernetes.io/managed-by``) costs one connection per namespace. Pods are
kept under their job's name (``volcano.sh/job-name``), and only what the waits read of them
(``kept_pod``): a pod as the API sends it is mostly env, volumes, probes and bookkeeping.

The cache answers the reads that only look. A verdict that deletes the job rests on a fresh
LIST (``step_io._confirmed``), and a job whose pods lack the label (submitted by someone else,
or by an older release), or any job while the pod watch fails, is read by a LIST; while the
watch's LIST is under way (``listing``), a look waits for it rather than send a LIST per job.
Each trigger hands the watch it subscribed to to its own steps and log follow
(``step_io.WatchedPods``); nothing points to it from the job watch the waits share.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_volcano_wandb.hooks.volcano_requests import JOB_NAME_LABEL
from airflow_volcano_wandb.job.ownership import MANAGED_BY_LABEL, MANAGED_SELECTOR
from airflow_volcano_wandb.wait.diagnostics import TASK_LABELS
from airflow_volcano_wandb.wait.namespace_watch import NamespaceWatch

#: The pods watched: those of this provider's jobs.
WATCHED_PODS_SELECTOR = MANAGED_SELECTOR
#: What of each part of a pod is kept (``kept_pod``).
KEPT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
)
KEPT_LABELS = (JOB_NAME_LABEL, *TASK_LABELS, MANAGED_BY_LABEL)
KEPT_CONTAINER_FIELDS = ("name", "image", "resources")
KEPT_STATUS = ("phase", "reason", "message", "startTime")
KEPT_CONTAINER_STATUS = ("name", "image", "ready", "started", "restartCount", "state", "lastState")
KEPT_CONDITION = ("type", "status", "reason", "message", "lastTransitionTime")


class NamespacePodWatcher(NamespaceWatch):
    """Keeps the latest copy of the namespace's managed pods, by job name."""

    resource = "pods"
    resource_words = "pods of managed Volcano jobs"
    list_call = "list_pods_page"
    watch_call = "watch_pods"
    # A pod as the API sends it is some 20 KiB once parsed: a page of 500 is 10 MB parsed at
    # once, whose freed memory the kept copies (their strings come from it) pin for good.
    # Pages of 100 hold the LIST's peak to a fifth, for 30 requests a (re)list at 3,000 pods.
    list_page_size = 100

    def _key(self, obj: dict[str, Any]) -> str | None:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)

    def _kept(self, obj: dict[str, Any]) -> dict[str, Any]:
        return kept_pod(obj)


def kept_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod as the cache keeps it: the ``KEPT_*`` fields, its owners' uids and its node, as
    new dicts with shared keys (a thousand jobs' pods are kept)."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    kept_metadata = _kept(metadata, KEPT_METADATA)
    kept_metadata["labels"] = _kept(metadata.get("labels") or {}, KEPT_LABELS)
    kept_metadata["ownerReferences"] = [
        _kept(owner, ("uid",)) for owner in metadata.get("ownerReferences") or []
    ]
    kept_spec = _kept(spec, ("nodeName",))
    kept_status = _kept(status, KEPT_STATUS)
    for kind in ("initContainers", "containers"):
        if spec.get(kind):
            kept_spec[kind] = [_kept(c, KEPT_CONTAINER_FIELDS) for c in spec[kind]]
    for kind in ("initContainerStatuses", "containerStatuses"):
        if status.get(kind):
            kept_status[kind] = [_kept(c, KEPT_CONTAINER_STATUS) for c in status[kind]]
    if status.get("conditions"):
        kept_status["conditions"] = [_kept(c, KEPT_CONDITION) for c in status["conditions"]]
    return {"metadata": kept_metadata, "spec": kept_spec, "status": kept_status}


def _kept(obj: Mapping[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """``obj``'s ``fields`` that it has, keyed by the names in ``fields``: one string each for
    all pods, where each pod parsed from the API has strings of its own."""
    return {key: obj[key] for key in fields if key in obj}

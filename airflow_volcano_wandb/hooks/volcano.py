"""Volcano jobs through the cncf.kubernetes provider's connection handling.

``VolcanoHook`` (sync, here) and ``AsyncVolcanoHook`` (for triggers, ``volcano_async``)
subclass the provider's ``KubernetesHook`` and ``AsyncKubernetesHook``, so a ``kubernetes``
connection means the same thing here as everywhere else in Airflow: in-cluster, kubeconfig
path or content, context, namespace. Objects come back as plain camelCase dicts, which the
pure modules read. Names, timeouts, retries and errors are ``kubernetes_api``'s. One method
name, one contract: ``VolcanoHook.list_jobs`` lists by selector, the async hook lists pages.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook
from kubernetes.client.rest import ApiException

from airflow_volcano_wandb.hooks import volcano_requests
from airflow_volcano_wandb.hooks.kubernetes_api import (
    JOBS_RESOURCE,
    PODGROUP_GROUP,
    PODGROUP_VERSION,
    QUEUE_RESOURCE,
    SYNC_CALL_TIMEOUT,
    JobExistsError,
    SecretExistsError,
    api_retry,
    permission_error,
    to_dict,
)

METADATA_ONLY = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"


class VolcanoHook(KubernetesHook):
    """Create, read, delete and inspect Volcano jobs (sync; used by operator and sensor)."""

    hook_name = "Volcano (Kubernetes)"

    def _call(
        self, verb: str, resource: str, namespace: str, fn, *args, gone=frozenset(), **kwargs
    ):
        """``fn``'s answer; ``None`` when the API answers one of the ``gone`` statuses."""
        kwargs.setdefault("_request_timeout", SYNC_CALL_TIMEOUT)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            if exc.status in gone:
                return None
            raise permission_error(exc, verb, resource, namespace) from exc

    @api_retry
    def create_job(self, body: Mapping[str, Any], namespace: str) -> dict:
        """Create a job; raise ``JobExistsError`` when one of that name exists."""
        try:
            return self._call(
                "create",
                JOBS_RESOURCE,
                namespace,
                self.custom_object_client.create_namespaced_custom_object,
                *volcano_requests.job_args(namespace),
                body,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise JobExistsError(body["metadata"]["name"]) from exc
            raise

    @api_retry
    def get_job(self, name: str, namespace: str) -> dict | None:
        """The job, or ``None`` when it does not exist."""
        return self._call(
            "get",
            JOBS_RESOURCE,
            namespace,
            self.custom_object_client.get_namespaced_custom_object,
            *volcano_requests.job_args(namespace, name),
            gone=volcano_requests.ABSENT,
        )

    @api_retry
    def list_jobs(
        self, namespace: str, label_selector: str, limit: int | None = None
    ) -> list[dict]:
        """The jobs matching ``label_selector`` (at most ``limit``, when given)."""
        result = self._call(
            "list",
            JOBS_RESOURCE,
            namespace,
            self.custom_object_client.list_namespaced_custom_object,
            *volcano_requests.job_args(namespace),
            label_selector=label_selector,
            limit=limit or None,
        )
        return volcano_requests.items(result)

    @api_retry
    def delete_job(
        self,
        name: str,
        namespace: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete with foreground propagation, so the job is gone only once its pods are.

        With ``uid``, a job of the same name but another uid (a newer submission) is left
        alone; with ``resource_version``, a job changed since it was read is too. Returns
        False when there was nothing to delete (or a precondition failed).
        """
        deleted = self._call(
            "delete",
            JOBS_RESOURCE,
            namespace,
            self.custom_object_client.delete_namespaced_custom_object,
            *volcano_requests.job_args(namespace, name),
            body=volcano_requests.delete_job_body(uid, resource_version),
            gone=volcano_requests.NOT_DELETED,
        )
        return deleted is not None  # a DELETE that deletes answers the job or a Status

    @api_retry
    def set_job_annotations(
        self, name: str, namespace: str, uid: str, annotations: Mapping[str, str]
    ) -> dict | None:
        """Set annotations on this submission of the job; the job as patched, or ``None`` when
        this submission is gone.

        The patch carries the uid (``volcano_requests.uid_guarded_merge_patch``), so a job
        recreated under the name is never touched.
        """
        return self._call(
            "patch",
            JOBS_RESOURCE,
            namespace,
            self.custom_object_client.patch_namespaced_custom_object,
            *volcano_requests.job_args(namespace, name),
            volcano_requests.uid_guarded_merge_patch(uid, annotations),
            gone=volcano_requests.NOT_PATCHED,
        )

    def wait_job_gone(self, name: str, namespace: str, timeout: float = 120) -> None:
        """Block until the job object is gone (foreground deletion waits for its pods)."""
        deadline = time.monotonic() + timeout
        while self.get_job(name, namespace) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Volcano job {namespace}/{name} still exists after {timeout}s")
            time.sleep(0.5)

    @api_retry
    def list_job_pods(self, name: str, namespace: str) -> list[dict]:
        pods = self._call(
            "list",
            "pods",
            namespace,
            self.core_v1_client.list_namespaced_pod,
            namespace,
            label_selector=volcano_requests.job_pods_selector(name),
        )
        return [to_dict(self.api_client, pod) for pod in pods.items]

    @api_retry
    def read_pod_log(
        self,
        pod: str,
        namespace: str,
        tail_lines: int | None = None,
        *,
        container: str | None = None,
        previous: bool = False,
        limit_bytes: int | None = None,
        timestamps: bool = False,
    ) -> str:
        """A pod's log (its only container's, or ``container``'s); ``previous``: the log of
        the container before its last restart; ``limit_bytes``: only its first bytes;
        ``timestamps``: each line after the kubelet's time. ``""`` when there is none."""
        return self._pod_log(
            pod,
            namespace,
            gone=frozenset({400, 404}),  # the container never started, or the pod is gone
            container=container,
            tail_lines=tail_lines,
            previous=previous,
            limit_bytes=limit_bytes or None,  # the client leaves a None parameter out
            timestamps=timestamps or None,
        )

    @api_retry
    def read_pod_log_since(self, pod: str, namespace: str, container: str, since: int) -> str:
        """The first byte of the log of the last ``since`` s (raises: a gone pod is no silence)."""
        return self._pod_log(pod, namespace, **volcano_requests.log_since_query(container, since))

    def _pod_log(self, pod: str, namespace: str, **params: Any) -> str:
        read = self.core_v1_client.read_namespaced_pod_log
        response = self._call(
            "get", "pods/log", namespace, read, pod, namespace, _preload_content=False, **params
        )
        return "" if response is None else volcano_requests.log_text(response.data)

    @api_retry
    def list_events(self, namespace: str, names: set[str]) -> list[dict]:
        """Events about any of ``names`` (the job, its PodGroup and its pods)."""
        events = self._call(
            "list", "events", namespace, self.core_v1_client.list_namespaced_event, namespace
        )
        return [
            to_dict(self.api_client, e)
            for e in events.items
            if e.involved_object is not None and e.involved_object.name in names
        ]

    @api_retry
    def list_podgroups(self, namespace: str, job_uid: str) -> list[dict]:
        """The PodGroups Volcano made for the job (owned by it)."""
        result = self._call(
            "list",
            "podgroups.scheduling.volcano.sh",
            namespace,
            self.custom_object_client.list_namespaced_custom_object,
            PODGROUP_GROUP,
            PODGROUP_VERSION,
            namespace,
            "podgroups",
        )
        return volcano_requests.owned_by(volcano_requests.items(result), job_uid)

    @api_retry
    def get_queue(self, name: str) -> dict | None:
        """The Volcano queue (cluster-scoped), or ``None`` when it does not exist."""
        return self._call(
            "get",
            QUEUE_RESOURCE,
            "",
            self.custom_object_client.get_cluster_custom_object,
            PODGROUP_GROUP,
            PODGROUP_VERSION,
            "queues",
            name,
            gone=volcano_requests.ABSENT,
        )

    @api_retry
    def list_nodes(self) -> list[dict]:
        """Every node of the cluster (cluster-scoped)."""
        nodes = self._call("list", "nodes", "", self.core_v1_client.list_node)
        return [to_dict(self.api_client, node) for node in nodes.items]

    def create_secret(self, body: Mapping[str, Any], namespace: str) -> dict:
        """Create a Secret; its metadata back. ``SecretExistsError`` when the name is taken,
        with ``maybe_ours`` when an earlier attempt of this call may have made it (it failed
        in a way that does not say it was not applied: a timeout, a 5xx, a lost connection).

        Asked for ``PartialObjectMetadata``: the apiserver answers a create with the whole
        Secret, key included (base64), which the Kubernetes client logs at DEBUG; so the key
        goes out once, in the request, and never comes back.
        """
        name = body["metadata"]["name"]
        maybe_applied = False

        @api_retry
        def create_secret() -> dict:  # named so in the retry's log
            nonlocal maybe_applied
            try:
                response = self._call(
                    "create",
                    "secrets",
                    namespace,
                    self.api_client.call_api,
                    f"/api/v1/namespaces/{namespace}/secrets",
                    "POST",
                    auth_settings=["BearerToken"],
                    _preload_content=False,
                    _return_http_data_only=True,
                    body=dict(body),
                    header_params={"Accept": METADATA_ONLY, "Content-Type": "application/json"},
                )
            except ApiException as exc:
                if exc.status == 409:
                    raise SecretExistsError(name, maybe_ours=maybe_applied) from exc
                maybe_applied |= exc.status != 429  # a throttled request was never handled
                raise
            except Exception:
                maybe_applied = True
                raise
            return json.loads(response.data)["metadata"]

        return create_secret()

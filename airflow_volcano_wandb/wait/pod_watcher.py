"""One watch of a namespace's pods of managed jobs, shared by every trigger in an event loop.

While a job runs, its wait reads the job's pods: for the restart budget, a rank stopped from
W&B, a container that cannot start and the master's stall, and the master-log follow for the
master pod. One LIST per job per ``pod_check_interval`` is about 2,000 requests a minute at
1,000 running jobs; one label-selected list+watch (``namespace_watch``) of the pods this
provider's jobs carry (``app.kubernetes.io/managed-by``, on every task's pod template) costs
one connection per namespace, whatever the number of jobs. Pods are kept under their job's
name (Volcano's ``volcano.sh/job-name`` label).

The cache answers the reads that only look. A verdict that deletes the job still rests on a
fresh LIST (``step_io._confirmed``), and a job whose pods do not carry the label (submitted
by someone else, or by a release before the label) is read by a LIST, as is every job while
the pod watch is not synced.

Each copy keeps what the readers read (metadata, the status, the containers' names and
images, the node): a pod spec's volumes, env and probes are most of its size.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any

from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from airflow_volcano_wandb.hooks.volcano_requests import JOB_NAME_LABEL
from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR
from airflow_volcano_wandb.wait import namespace_watch
from airflow_volcano_wandb.wait.namespace_watch import NamespaceWatch

#: The pods watched: those of this provider's jobs.
WATCHED_PODS_SELECTOR = MANAGED_SELECTOR
#: What of a container's spec is kept.
KEPT_CONTAINER_FIELDS = ("name", "image", "resources")


class NamespacePodWatcher(NamespaceWatch):
    """Keeps the latest copy of the namespace's managed pods, by job name."""

    resource = "pods"
    resource_words = "pods of managed Volcano jobs"

    async def _list_page(
        self, hook: AsyncVolcanoHook, api: Any, continue_token: str | None
    ) -> tuple[list[dict], str, str | None]:
        return await hook.list_pods_page(
            api, self.namespace, self.label_selector, namespace_watch.LIST_PAGE_SIZE, continue_token
        )

    def _watch_events(
        self, hook: AsyncVolcanoHook, api: Any, resource_version: str
    ) -> AsyncIterator[tuple[str, dict]]:
        return hook.watch_pods(
            api,
            self.namespace,
            resource_version,
            namespace_watch.WATCH_TIMEOUT_SECONDS,
            label_selector=self.label_selector,
        )

    def _key(self, obj: dict) -> str | None:
        return ((obj.get("metadata") or {}).get("labels") or {}).get(JOB_NAME_LABEL)

    def _kept(self, obj: dict) -> dict:
        return kept_pod(obj)


def kept_pod(pod: dict) -> dict:
    """The pod as the cache keeps it: its metadata (but ``managedFields``), its status, and of
    its spec the node and the containers' names, images and resources."""
    metadata = dict(pod.get("metadata") or {})
    metadata.pop("managedFields", None)
    spec = pod.get("spec") or {}
    kept_spec: dict[str, Any] = {
        kind: [_kept_container(c) for c in spec.get(kind) or []]
        for kind in ("initContainers", "containers")
        if spec.get(kind)
    }
    if spec.get("nodeName"):
        kept_spec["nodeName"] = spec["nodeName"]
    return {"metadata": metadata, "spec": kept_spec, "status": pod.get("status") or {}}


def _kept_container(container: Mapping[str, Any]) -> dict:
    return {key: container[key] for key in KEPT_CONTAINER_FIELDS if key in container}

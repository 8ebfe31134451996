"""One watch of a namespace's Volcano jobs, shared by every trigger in an event loop.

The first trigger for a (connection, namespace, label selector) starts a single list+watch
(``namespace_watch``, which says what a waiter may rely on); later triggers subscribe to it,
and each is woken only when its own job changes. The calls a wait makes about its job
(``step_io.JobCalls``) go over the watch's open client: ``fetch`` reads one job afresh, for a
verdict that must not rest on the cache (before deleting anything) or a job the watch has not
shown; ``list_pods`` LISTs a job's pods that the wait's own pod watch does not hold.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.hooks.kubernetes_api import (
    JOBS_RESOURCE,
    is_transient,
    permission_error,
    retry_after_seconds,
)
from airflow_volcano_wandb.wait import namespace_watch
from airflow_volcano_wandb.wait.namespace_watch import NamespaceWatch
from airflow_volcano_wandb.wait.pod_watcher import WATCHED_PODS_SELECTOR, NamespacePodWatcher

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

log = logging.getLogger(__name__)

# fetch() serves a trigger about to act: it retries transient errors, but only this long.
FETCH_RETRY_BUDGET = 10.0
FETCH_BACKOFF_INITIAL = 0.25


class NamespaceJobWatcher(NamespaceWatch):
    """Keeps the latest copy of the namespace's jobs (matching a selector), wakes subscribers."""

    resource = JOBS_RESOURCE
    resource_words = f"Volcano jobs ({JOBS_RESOURCE})"
    list_call = "list_jobs_page"
    watch_call = "watch_jobs"

    def job(self, name: str) -> dict[str, Any] | None:
        """The watch's copy of the job while the watch is up; None if unseen or not synced."""
        copies = self.objects(name)
        return copies[0] if copies else None

    async def fetch(self, name: str) -> dict[str, Any] | None:
        """The job as the apiserver has it now (over the watch's open client); None if there
        is no job of that name.

        Transient errors are retried for up to ``FETCH_RETRY_BUDGET`` seconds; anything else
        is raised (a 403 naming the missing permission). While the watch itself is failing,
        one attempt is made: the watch's own backoff probes the apiserver for every waiter,
        and retries would multiply a thousand waiters' attempts in an outage.
        """
        from kubernetes_asyncio.client.exceptions import ApiException

        budget = 0.0 if self.failing_since is not None else FETCH_RETRY_BUDGET
        deadline = time.monotonic() + budget
        backoff = FETCH_BACKOFF_INITIAL
        while True:
            try:
                job = await self.over_client(
                    lambda hook, api: hook.read_job(api, name, self.namespace)
                )
            except Exception as exc:
                delay = max(backoff * (1 + random.random() / 2), retry_after_seconds(exc))
                if not is_transient(exc) or time.monotonic() + delay > deadline:
                    if isinstance(exc, ApiException) and exc.status == 403:
                        raise permission_error(exc, "get", JOBS_RESOURCE, self.namespace) from exc
                    raise
                log.info(
                    "Reading Volcano job %s/%s failed (%s); retrying", self.namespace, name, exc
                )
                await asyncio.sleep(delay)
                backoff *= 2
                continue
            return self._kept(job) if job is not None else None

    async def annotate(self, job: Mapping[str, Any], annotations: dict[str, str]) -> bool:
        """Add ``annotations`` to this submission of ``job``; False when that submission is
        gone."""
        body = dict(job)  # read only, to name the submission
        return await self.over_client(lambda hook, api: hook.annotate_job(api, body, annotations))

    async def list_pods(self, job_name: str) -> list[dict[str, Any]]:
        """The job's pods as the apiserver has them now (one label-selected LIST)."""
        return await self.over_client(
            lambda hook, api: hook.list_job_pods(api, job_name, self.namespace)
        )

    async def log_since(self, pod: str, container: str, since_seconds: int) -> str:
        """The first byte of a container's log of the last ``since_seconds`` (``""``: it
        printed nothing then), for the stall timeout."""
        return await self.over_client(
            lambda hook, api: hook.read_pod_log_since(
                api, pod, self.namespace, container, since_seconds
            )
        )


def shared_watcher(
    key: Hashable,
    namespace: str,
    hook_factory: Callable[[], AsyncVolcanoHook],
    label_selector: str | None = None,
) -> NamespaceJobWatcher:
    """The event loop's job watch for this connection, namespace and selector."""
    return namespace_watch.shared(NamespaceJobWatcher, key, namespace, hook_factory, label_selector)


def shared_pod_watcher(
    key: Hashable, namespace: str, hook_factory: Callable[[], AsyncVolcanoHook]
) -> NamespacePodWatcher:
    """The event loop's watch of managed jobs' pods for this connection and namespace."""
    return namespace_watch.shared(
        NamespacePodWatcher, key, namespace, hook_factory, WATCHED_PODS_SELECTOR
    )


release = namespace_watch.release


def active_watchers() -> int:
    """How many job-watch connections this process holds (for benchmarks and tests)."""
    return namespace_watch.active_watches(NamespaceJobWatcher)

"""One watch of a namespace's Volcano jobs, shared by every trigger in an event loop.

A triggerer process may hold a thousand deferred training tasks. Polling each job costs a
request per job per interval; one watch connection per job costs a connection each. Here the
first trigger for a (connection, namespace, label selector) starts a single list+watch; later
triggers subscribe to it, and each is woken only when its own job changes.

What a waiter may rely on:

- ``synced`` is set only while the watch is up (after a complete, paginated LIST) and is
  cleared the moment the list or watch fails; ``job(name)`` answers from the cache only
  while it is set, so nobody judges a job by a copy the watch has stopped updating.
- No failure is final. Every one (401, 403, 404, 410, 429, 5xx, timeouts, refused or reset
  connections, an unreadable kubeconfig) is retried with capped, jittered exponential
  backoff that honours ``Retry-After``, over a fresh hook and client each time, so rotated
  credentials and a replaced kubeconfig are picked up. ``failing_since`` and
  ``last_failure`` describe the current run of failures, and every subscriber is woken
  when they change: how long to tolerate it is each waiter's own decision.
- The backoff starts over, and the run of failures ends (``failing_since`` back to None),
  only once a watch has stayed up for ``STABLE_WATCH_SECONDS``: a LIST that succeeds
  followed by a watch that fails at once must neither relist in a tight loop nor hide a
  lasting failure (a Role without ``watch``) behind brief successes.
- The cache is bounded: an optional label selector narrows it to the jobs of interest, and
  ``metadata.managedFields`` (often most of an object's size) is dropped from every copy.
- ``fetch(name)`` reads one job afresh over the watch's own client, for a verdict that must
  not rest on the cache alone (before deleting anything) or a job the watch has not shown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from airflow_volcano_wandb.hooks.kubernetes_api import (
    JOBS_RESOURCE,
    describe_failure,
    is_transient,
    permission_error,
    retry_after_seconds,
)
from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

log = logging.getLogger(__name__)

RECONNECT_BACKOFF_INITIAL = 0.5
RECONNECT_BACKOFF_MAX = 10.0
# A watch that has stayed up this long counts as recovered: the backoff starts over and the
# failure run ends. Shorter would let a watch that dies soon after each LIST relist in a loop.
STABLE_WATCH_SECONDS = 30.0
WATCH_TIMEOUT_SECONDS = 300
LIST_PAGE_SIZE = 500
# fetch() serves a trigger about to act: it retries transient errors, but only this long.
FETCH_RETRY_BUDGET = 10.0
FETCH_BACKOFF_INITIAL = 0.25


@dataclass(eq=False)  # each subscription is itself, however alike: hash by identity
class Subscription:
    """A trigger's interest in one job: ``changed`` is set when the job or the watch's health
    changes."""

    name: str
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class NamespaceJobWatcher:
    """Keeps the latest copy of the namespace's jobs (matching a selector), wakes subscribers."""

    def __init__(
        self,
        hook_factory: Callable[[], AsyncVolcanoHook],
        namespace: str,
        label_selector: str | None = None,
    ) -> None:
        self._hook_factory = hook_factory
        self.namespace = namespace
        self.label_selector = label_selector
        self._jobs: dict[str, dict] = {}
        self._subscriptions: dict[str, set[Subscription]] = {}
        self.synced = asyncio.Event()
        self.failing_since: float | None = None
        self.last_failure = ""
        self.connects = 0
        self._client: tuple[AsyncVolcanoHook, Any] | None = None
        self._backoff = RECONNECT_BACKOFF_INITIAL
        self._stable_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task | None = None

    # ---- subscribers -------------------------------------------------------------------

    def subscribe(self, name: str) -> Subscription:
        subscription = Subscription(name)
        self._subscriptions.setdefault(name, set()).add(subscription)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"volcano-job-watch-{self.namespace}"
            )
        return subscription

    def unsubscribe(self, subscription: Subscription) -> int:
        """Drop a subscription; returns how many remain."""
        subs = self._subscriptions.get(subscription.name)
        if subs is not None:
            subs.discard(subscription)
            if not subs:
                del self._subscriptions[subscription.name]
        return sum(len(s) for s in self._subscriptions.values())

    def job(self, name: str) -> dict | None:
        """The watch's copy of the job while the watch is up; None if unseen or not synced."""
        if not self.synced.is_set():
            return None
        return self._jobs.get(name)

    async def fetch(self, name: str) -> dict | None:
        """The job as the apiserver has it now; None if there is no job of that name.

        Goes over the watch's open client when there is one (no TLS handshake per call).
        Transient errors are retried for up to ``FETCH_RETRY_BUDGET`` seconds; anything
        else, or a transient error that outlasts the budget, is raised (a 403 as an error
        naming the missing permission).
        """
        deadline = time.monotonic() + FETCH_RETRY_BUDGET
        backoff = FETCH_BACKOFF_INITIAL
        while True:
            client = self._client
            try:
                job = await self._read(client, name)
            except Exception as exc:
                # A reconnect may close the client under a read: that is not the API failing.
                replaced = client is not None and client is not self._client
                delay = max(backoff * (1 + random.random() / 2), retry_after_seconds(exc))
                if not (replaced or is_transient(exc)) or time.monotonic() + delay > deadline:
                    if isinstance(exc, ApiException) and exc.status == 403:
                        raise permission_error(exc, "get", JOBS_RESOURCE, self.namespace) from exc
                    raise
                log.info(
                    "Reading Volcano job %s/%s failed (%s); retrying", self.namespace, name, exc
                )
                await asyncio.sleep(delay)
                backoff *= 2
                continue
            return _without_managed_fields(job) if job is not None else None

    async def annotate(self, job: dict, annotations: dict[str, str]) -> bool:
        """Add ``annotations`` to this submission of ``job`` over the watch's open client (or
        one of its own while the watch is down); False when that submission is gone."""
        client = self._client
        if client is not None:
            hook, api = client
            return await hook.annotate_job(api, job, annotations)
        hook = self._hook_factory()
        async with hook.get_conn() as api:
            return await hook.annotate_job(api, job, annotations)

    async def _read(self, client: tuple[AsyncVolcanoHook, Any] | None, name: str) -> dict | None:
        if client is not None:
            hook, api = client
            return await hook.read_job(api, name, self.namespace)
        hook = self._hook_factory()  # the watch is down: a client of our own, for this read
        async with hook.get_conn() as api:
            return await hook.read_job(api, name, self.namespace)

    async def list_pods(self, job_name: str) -> list[dict]:
        """The job's pods as the apiserver has them now (one label-selected LIST), over the
        watch's open client when there is one; errors are raised. For the restart budget:
        a job's status shows no container restarts, only its pods do."""
        client = self._client
        if client is not None:
            hook, api = client
            return await hook.list_job_pods(api, job_name, self.namespace)
        hook = self._hook_factory()
        async with hook.get_conn() as api:
            return await hook.list_job_pods(api, job_name, self.namespace)

    async def log_since(self, pod: str, container: str, since_seconds: int) -> str:
        """The first byte of a container's log of the last ``since_seconds`` (``""``: it
        printed nothing then), over the watch's open client when there is one; errors are
        raised. For the stall timeout: a job's status shows no silence, only its log does."""
        client = self._client
        if client is not None:
            hook, api = client
            return await hook.read_pod_log_since(api, pod, self.namespace, container, since_seconds)
        hook = self._hook_factory()
        async with hook.get_conn() as api:
            return await hook.read_pod_log_since(api, pod, self.namespace, container, since_seconds)

    async def stop(self) -> None:
        self._cancel_stable_timer()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ---- health ------------------------------------------------------------------------

    def _wake_all(self) -> None:
        for subscriptions in self._subscriptions.values():
            for subscription in subscriptions:
                subscription.changed.set()

    def _watch_up(self) -> None:
        """The cache is complete and the watch is about to follow it: trust the cache."""
        self.synced.set()
        self._wake_all()
        self._cancel_stable_timer()
        self._stable_timer = asyncio.get_running_loop().call_later(
            STABLE_WATCH_SECONDS, self._watch_stable
        )

    def _watch_stable(self) -> None:
        self._stable_timer = None
        self._backoff = RECONNECT_BACKOFF_INITIAL
        if self.failing_since is not None:
            log.info(
                "Watch of Volcano jobs in %s recovered after %.0fs",
                self.namespace,
                time.monotonic() - self.failing_since,
            )
            self.failing_since = None
            self.last_failure = ""
            self._wake_all()

    def _watch_down(self) -> None:
        """Events may be missed from now on: stop vouching for the cache."""
        self._cancel_stable_timer()
        if self.synced.is_set():
            self.synced.clear()
            self._wake_all()

    def _failed(self, exc: Exception, verb: str) -> float:
        """Record a failure of the list or watch; return how long to wait before retrying."""
        self._watch_down()
        message = describe_failure(exc, verb, self.namespace)
        if self.failing_since is None or message != self.last_failure:
            if self.failing_since is None:
                self.failing_since = time.monotonic()
            self.last_failure = message
            self._wake_all()
        delay = max(
            min(self._backoff * (1 + random.random() / 2), RECONNECT_BACKOFF_MAX),
            retry_after_seconds(exc),
        )
        self._backoff = min(self._backoff * 2, RECONNECT_BACKOFF_MAX)
        log.warning(
            "%s; retrying in %.1fs",
            message,
            delay,
            exc_info=log.isEnabledFor(logging.DEBUG),
        )
        return delay

    def _cancel_stable_timer(self) -> None:
        if self._stable_timer is not None:
            self._stable_timer.cancel()
            self._stable_timer = None

    # ---- the watch ---------------------------------------------------------------------

    def _notify(self, name: str) -> None:
        for subscription in self._subscriptions.get(name, ()):
            subscription.changed.set()

    async def _run(self) -> None:
        while True:
            verb = "list"
            try:
                # A new hook per connection: it loads the kubeconfig (or in-cluster token)
                # again, so rotated credentials or a replaced file are used from now on.
                hook = self._hook_factory()
                async with hook.get_conn() as api:
                    self.connects += 1
                    self._client = (hook, api)
                    resource_version = await self._list_all(hook, api)
                    self._watch_up()
                    verb = "watch"
                    while True:
                        resource_version, gone = await self._follow(hook, api, resource_version)
                        if gone:
                            # Our resourceVersion is older than etcd keeps: events were
                            # missed, so the cache is stale until the relist below.
                            self._watch_down()
                            break
                continue  # relist at once: a 410 is routine, not a failure
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self._failed(exc, verb)
            finally:
                self._client = None
            await asyncio.sleep(delay)

    async def _list_all(self, hook: AsyncVolcanoHook, api: Any) -> str:
        """Replace the cache with a paginated LIST; return its resourceVersion, to watch from.

        A 410 between pages (the continue token expired) is raised like any failure, and the
        retry lists again from the first page: pages of two snapshots must not be mixed.
        """
        jobs: dict[str, dict] = {}
        continue_token = None
        while True:
            items, resource_version, continue_token = await hook.list_jobs_page(
                api, self.namespace, self.label_selector, LIST_PAGE_SIZE, continue_token
            )
            for item in items:
                jobs[item["metadata"]["name"]] = _without_managed_fields(item)
            if continue_token is None:
                break
        before, self._jobs = self._jobs, jobs
        for name in before.keys() | jobs.keys():
            if _resource_version(before.get(name)) != _resource_version(jobs.get(name)):
                self._notify(name)
        return resource_version

    async def _follow(
        self, hook: AsyncVolcanoHook, api: Any, resource_version: str
    ) -> tuple[str, bool]:
        """Apply watch events until the server ends the stream; say if it answered 410 Gone."""
        try:
            async for kind, obj in hook.watch_jobs(
                api,
                self.namespace,
                resource_version,
                WATCH_TIMEOUT_SECONDS,
                label_selector=self.label_selector,
            ):
                resource_version = obj["metadata"].get("resourceVersion", resource_version)
                if kind == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                if kind == "DELETED":
                    self._jobs.pop(name, None)
                else:
                    self._jobs[name] = _without_managed_fields(obj)
                self._notify(name)
        except ApiException as exc:
            if exc.status == 410:
                return resource_version, True
            raise
        return resource_version, False


def _without_managed_fields(obj: dict) -> dict:
    """The object without ``metadata.managedFields``: server-side-apply bookkeeping that
    nothing here reads and that can outweigh the rest of the object."""
    obj.get("metadata", {}).pop("managedFields", None)
    return obj


def _resource_version(obj: dict | None) -> str | None:
    return obj["metadata"].get("resourceVersion") if obj is not None else None


_watchers: dict[tuple[int, Hashable], NamespaceJobWatcher] = {}


def shared_watcher(
    key: Hashable,
    namespace: str,
    hook_factory: Callable[[], AsyncVolcanoHook],
    label_selector: str | None = None,
) -> NamespaceJobWatcher:
    """The event loop's watcher for this connection, namespace and selector, made on first use.

    Keyed by the running loop too: a watcher's task and events belong to one loop, and
    ``dag.test()`` or the sync operator run each wait in a loop of its own.
    """
    loop_key = (id(asyncio.get_running_loop()), (key, namespace, label_selector))
    watcher = _watchers.get(loop_key)
    if watcher is None:
        watcher = _watchers[loop_key] = NamespaceJobWatcher(hook_factory, namespace, label_selector)
    return watcher


async def release(watcher: NamespaceJobWatcher, subscription: Subscription) -> None:
    """Unsubscribe; the last subscriber out stops the watch and closes its connection."""
    if watcher.unsubscribe(subscription) == 0:
        for loop_key, candidate in list(_watchers.items()):
            if candidate is watcher:
                del _watchers[loop_key]
        await watcher.stop()


def active_watchers() -> int:
    """How many watch connections this process holds (for benchmarks and tests)."""
    return len(_watchers)

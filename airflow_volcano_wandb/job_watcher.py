"""One watch of a namespace's Volcano jobs, shared by every trigger in an event loop.

A triggerer process may hold a thousand deferred training tasks. Polling each job costs a
request per job per interval; one watch connection per job costs a connection each. Here the
first trigger for a (connection, namespace) pair starts a single list+watch; later triggers
subscribe to it, and each is woken only when its own job changes. The watch resumes from the
last resourceVersion, relists when the server says it is too old (410 Gone), and reconnects
with backoff after any error, relisting so that nothing that happened meanwhile is missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from airflow_volcano_wandb.hooks.volcano import (
    AsyncVolcanoHook,
    permission_error,
    retry_after_seconds,
)

log = logging.getLogger(__name__)

RECONNECT_BACKOFF_MAX = 10.0
WATCH_TIMEOUT_SECONDS = 300


@dataclass(eq=False)  # each subscription is itself, however alike: hash by identity
class Subscription:
    """A trigger's interest in one job: ``changed`` is set whenever the job's state moves."""

    name: str
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class NamespaceJobWatcher:
    """Keeps the latest copy of every job in a namespace, and wakes subscribers on change."""

    def __init__(self, hook_factory: Callable[[], AsyncVolcanoHook], namespace: str) -> None:
        self._hook_factory = hook_factory
        self.namespace = namespace
        self._jobs: dict[str, dict] = {}
        self._subscriptions: dict[str, set[Subscription]] = {}
        self.synced = asyncio.Event()
        self.connects = 0
        # Set when the API refuses the list or watch (403): retrying cannot fix that, so
        # every waiter is told at once instead of waiting forever.
        self.error: Exception | None = None
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
        """The latest copy of the job seen by the watch, or None if the watch has not seen it."""
        return self._jobs.get(name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # ---- the watch ---------------------------------------------------------------------

    def _notify(self, name: str) -> None:
        for subscription in self._subscriptions.get(name, ()):
            subscription.changed.set()

    def _replace_all(self, items: list[dict]) -> None:
        before = self._jobs
        self._jobs = {item["metadata"]["name"]: item for item in items}
        for name in set(before) | set(self._jobs):
            if before.get(name) != self._jobs.get(name):
                self._notify(name)

    async def _run(self) -> None:
        backoff = 0.5
        hook = self._hook_factory()
        while True:
            verb = "list"
            try:
                async with hook.get_conn() as api:
                    self.connects += 1
                    items, resource_version = await hook.list_jobs(api, self.namespace)
                    self._replace_all(items)
                    self.synced.set()
                    backoff = 0.5
                    verb = "watch"
                    while True:
                        resource_version, gone = await self._follow(hook, api, resource_version)
                        if gone:
                            break  # relist: our resourceVersion is older than etcd keeps
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # any failure: back off, then relist and watch again
                if isinstance(exc, ApiException) and exc.status == 403:
                    self._refused(exc, verb)  # retrying cannot grant a permission
                    return
                log.warning(
                    "Watch of Volcano jobs in %s failed (%s: %s); reconnecting in %.1fs",
                    self.namespace,
                    type(exc).__name__,
                    exc,
                    backoff,
                    exc_info=log.isEnabledFor(logging.DEBUG),
                )
                await asyncio.sleep(
                    max(backoff * (1 + random.random() / 2), retry_after_seconds(exc))
                )
                backoff = min(backoff * 2, RECONNECT_BACKOFF_MAX)

    def _refused(self, exc: ApiException, verb: str) -> None:
        """Tell every waiter which permission is missing, at once."""
        self.error = permission_error(exc, verb, "jobs.batch.volcano.sh", self.namespace)
        log.error("%s", self.error)
        for subscriptions in self._subscriptions.values():
            for subscription in subscriptions:
                subscription.changed.set()

    async def _follow(
        self, hook: AsyncVolcanoHook, api: Any, resource_version: str
    ) -> tuple[str, bool]:
        """Apply watch events until the server ends the stream; say if it answered 410 Gone."""
        try:
            async for kind, obj in hook.watch_jobs(
                api, self.namespace, resource_version, WATCH_TIMEOUT_SECONDS
            ):
                resource_version = obj["metadata"].get("resourceVersion", resource_version)
                if kind == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                if kind == "DELETED":
                    self._jobs.pop(name, None)
                else:
                    self._jobs[name] = obj
                self._notify(name)
        except ApiException as exc:
            if exc.status == 410:  # our resourceVersion is older than etcd keeps: relist
                return resource_version, True
            raise
        return resource_version, False


_watchers: dict[tuple[int, Hashable], NamespaceJobWatcher] = {}


def shared_watcher(
    key: Hashable, namespace: str, hook_factory: Callable[[], AsyncVolcanoHook]
) -> NamespaceJobWatcher:
    """The event loop's watcher for this connection and namespace, made on first use.

    Keyed by the running loop too: a watcher's task and events belong to one loop, and
    ``dag.test()`` or the sync operator run each wait in a loop of its own.
    """
    loop_key = (id(asyncio.get_running_loop()), (key, namespace))
    watcher = _watchers.get(loop_key)
    if watcher is None:
        watcher = _watchers[loop_key] = NamespaceJobWatcher(hook_factory, namespace)
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

"""One list+watch of a kind of object in a namespace, kept as a cache that waiters share.

A triggerer may hold a thousand deferred training tasks: polling costs a request per job per
interval, a watch per job a connection each. Here one list+watch per (event loop, connection,
namespace, label selector) and kind keeps the latest copy of every object it selects, grouped
under a key (a job's name: the job, or its pods); each subscriber is woken only when its key
changes. ``job_watcher`` and ``pod_watcher`` are its two kinds.

What a waiter may rely on:

- ``synced`` is set only while the watch is up (after a complete, paginated LIST) and is
  cleared the moment the list or watch fails; :meth:`NamespaceWatch.objects` answers from
  the cache only while it is set, so nobody judges by a copy the watch has stopped updating.
- No failure is final. Every one (401, 403, 404, 410, 429, 5xx, timeouts, an unreadable
  kubeconfig) is retried with capped, jittered backoff that honours ``Retry-After``, over a
  fresh hook and client each time (rotated credentials are picked up). ``failing_since`` and
  ``last_failure`` describe the current run of failures, and every subscriber is woken when
  they change: how long to tolerate it is each waiter's own decision.
- The backoff starts over, and the run of failures ends (``failing_since`` back to None),
  only once a watch has stayed up for ``STABLE_WATCH_SECONDS``: a LIST that succeeds
  followed by a watch that fails at once must neither relist in a tight loop nor hide a
  lasting failure (a Role without ``watch``) behind brief successes.
- The cache is bounded: a label selector narrows it to the objects of interest, and each kind
  keeps only what its readers read (``metadata.managedFields``, often most of an object's
  size, never).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from airflow_volcano_wandb.hooks.kubernetes_api import describe_failure, retry_after_seconds
from airflow_volcano_wandb.hooks.shared_client import LentClient
from airflow_volcano_wandb.wait import heap

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

log = logging.getLogger(__name__)

RECONNECT_BACKOFF_INITIAL = 0.5
RECONNECT_BACKOFF_MAX = 10.0
# A watch that has stayed up this long counts as recovered: the backoff starts over and the
# failure run ends. Shorter would let a watch that dies soon after each LIST relist in a loop.
STABLE_WATCH_SECONDS = 30.0
WATCH_TIMEOUT_SECONDS = 300
LIST_PAGE_SIZE = 500


@dataclass(eq=False)  # each subscription is itself, however alike: hash by identity
class Subscription:
    """A waiter's interest in one key: ``changed`` is set when the key's objects or the
    watch's health change."""

    name: str
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class NamespaceWatch:
    """The latest copy of the namespace's objects of one kind (matching a selector), grouped
    by key; wakes the subscribers of a key when it changes. A kind says what to list and watch
    (``list_call``, ``watch_call``), how its objects are grouped (:meth:`_key`) and what of
    each is kept (:meth:`_kept`)."""

    #: What is watched, in words for a log and for RBAC (``describe_failure``).
    resource = ""
    resource_words = ""
    #: The ``AsyncVolcanoHook`` calls that page a LIST and stream a watch of the kind.
    list_call = ""
    watch_call = ""
    #: Objects per page of the LIST: a page is parsed whole before its copies are kept.
    list_page_size = LIST_PAGE_SIZE

    def __init__(
        self,
        hook_factory: Callable[[], AsyncVolcanoHook],
        namespace: str,
        label_selector: str | None = None,
    ) -> None:
        self._hook_factory = hook_factory
        self.namespace = namespace
        self.label_selector = label_selector
        self._objects: dict[str, dict[str, dict[str, Any]]] = {}  # key -> object name -> object
        self._subscriptions: dict[str, set[Subscription]] = {}
        self.synced = asyncio.Event()
        self.failing_since: float | None = None
        self.last_failure = ""
        self.connects = 0
        self._client: LentClient | None = None
        self._backoff = RECONNECT_BACKOFF_INITIAL
        self._stable_timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    # ---- what a kind says --------------------------------------------------------------

    def _key(self, obj: dict[str, Any]) -> str | None:
        """The key the object is kept under; ``None``: not kept."""
        return str(obj["metadata"]["name"])

    def _kept(self, obj: dict[str, Any]) -> dict[str, Any]:
        """What of the object the cache keeps."""
        obj.get("metadata", {}).pop("managedFields", None)
        return obj

    # ---- subscribers -------------------------------------------------------------------

    def subscribe(self, name: str) -> Subscription:
        subscription = Subscription(name)
        self._subscriptions.setdefault(name, set()).add(subscription)
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"watch-{self.resource}-{self.namespace}"
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

    def objects(self, key: str) -> list[dict[str, Any]] | None:
        """The watch's copies of the objects under ``key`` (``[]``: none) while the watch is
        up; ``None`` while it is not synced."""
        if not self.synced.is_set():
            return None
        return list(self._objects.get(key, {}).values())

    @property
    def listing(self) -> bool:
        """Whether the watch is (re)listing without failing: its copies come soon."""
        return self._task is not None and not self.synced.is_set() and self.failing_since is None

    async def over_client(self, call: Callable[[AsyncVolcanoHook, Any], Awaitable[R]]) -> R:
        """``call(hook, api)`` over the watch's open client (no TLS handshake per call; a
        reconnect never closes it under the call), or over a client of its own while the watch
        is down; errors are raised."""
        client = self._client
        if client is None:
            hook = self._hook_factory()
            async with hook.get_conn() as api:
                return await call(hook, api)
        return await client.call(call)

    async def stop(self) -> None:
        """End the watch; the cache answers no more (``objects`` is ``None`` from now on)."""
        self._cancel_stable_timer()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.synced.clear()
        self._objects = {}

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
        # The waiters' first looks after the LIST (a triggerer's start: a thousand at once)
        # are over by now: what they freed goes back too.
        heap.release_free_memory()
        self._backoff = RECONNECT_BACKOFF_INITIAL
        if self.failing_since is not None:
            log.info(
                "Watch of %s in %s recovered after %.0fs",
                self.resource_words,
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
        message = describe_failure(exc, verb, self.namespace, self.resource, self.resource_words)
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
            "%s; retrying in %.1fs", message, delay, exc_info=log.isEnabledFor(logging.DEBUG)
        )
        return delay

    def _cancel_stable_timer(self) -> None:
        if self._stable_timer is not None:
            self._stable_timer.cancel()
            self._stable_timer = None

    # ---- the watch ---------------------------------------------------------------------

    def _notify(self, key: str) -> None:
        for subscription in self._subscriptions.get(key, ()):
            subscription.changed.set()

    async def _run(self) -> None:
        while True:
            verb = "list"
            try:
                # A new hook per connection: it loads the kubeconfig (or in-cluster token)
                # again, so rotated credentials or a replaced file are used from now on.
                hook = self._hook_factory()
                client = await LentClient.open(hook)
                self.connects += 1
                self._client = client
                api = client.api
                try:
                    resource_version = await self._list_all(hook, api)
                    heap.release_free_memory()  # the LIST's pages, freed: their memory too
                    self._watch_up()
                    verb = "watch"
                    while True:
                        resource_version, gone = await self._follow(hook, api, resource_version)
                        if gone:
                            # Our resourceVersion is older than etcd keeps: events were
                            # missed, so the cache is stale until the relist below.
                            self._watch_down()
                            break
                finally:
                    self._client = None  # lent no more; closed once the calls over it return
                    await client.let_go()
                continue  # relist at once: a 410 is routine, not a failure
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                delay = self._failed(exc, verb)
            await asyncio.sleep(delay)

    async def _list_all(self, hook: AsyncVolcanoHook, api: Any) -> str:
        """Replace the cache with a paginated LIST; return its resourceVersion, to watch from.
        A 410 between pages is raised like any failure: pages of two snapshots must not mix."""
        # the hook's method of this kind, named by the subclass
        list_page: Callable[..., Awaitable[tuple[list[dict[str, Any]], str, str | None]]]
        list_page = getattr(hook, self.list_call)
        listed: dict[str, dict[str, dict[str, Any]]] = {}
        continue_token = None
        while True:
            items, resource_version, continue_token = await list_page(
                api, self.namespace, self.label_selector, self.list_page_size, continue_token
            )
            for item in items:
                key = self._key(item)
                if key is not None:
                    listed.setdefault(key, {})[item["metadata"]["name"]] = self._kept(item)
            if continue_token is None:
                break
        before, self._objects = self._objects, listed
        for key in before.keys() | listed.keys():
            if _versions(before.get(key)) != _versions(listed.get(key)):
                self._notify(key)
        return resource_version

    async def _follow(
        self, hook: AsyncVolcanoHook, api: Any, resource_version: str
    ) -> tuple[str, bool]:
        """Apply watch events until the server ends the stream; say if it answered 410 Gone."""
        from kubernetes_asyncio.client.exceptions import ApiException

        watch: Callable[..., AsyncIterator[tuple[str, dict[str, Any]]]]
        watch = getattr(hook, self.watch_call)
        try:
            async for kind, obj in watch(
                api,
                self.namespace,
                resource_version,
                WATCH_TIMEOUT_SECONDS,
                label_selector=self.label_selector,
            ):
                resource_version = obj["metadata"].get("resourceVersion", resource_version)
                if kind == "BOOKMARK":
                    continue
                key = self._key(obj)
                if key is None:
                    continue
                name = obj["metadata"]["name"]
                if kind == "DELETED":
                    group = self._objects.get(key, {})
                    group.pop(name, None)
                    if not group:
                        self._objects.pop(key, None)
                else:
                    self._objects.setdefault(key, {})[name] = self._kept(obj)
                self._notify(key)
        except ApiException as exc:
            if exc.status == 410:
                return resource_version, True
            raise
        return resource_version, False


def _versions(group: dict[str, dict[str, Any]] | None) -> dict[str, str | None]:
    return {name: obj["metadata"].get("resourceVersion") for name, obj in (group or {}).items()}


_watches: dict[tuple[Any, ...], NamespaceWatch] = {}
W = TypeVar("W", bound=NamespaceWatch)
R = TypeVar("R")  # what a call over the client returns


def shared(
    kind: type[W],
    key: Any,
    namespace: str,
    hook_factory: Callable[[], AsyncVolcanoHook],
    label_selector: str | None = None,
) -> W:
    """The event loop's watch of this kind for this connection, namespace and selector, made
    on first use; keyed by the loop too, as ``dag.test()`` and a sync wait run their own."""
    loop_key = (id(asyncio.get_running_loop()), kind, key, namespace, label_selector)
    watch = _watches.get(loop_key)
    if watch is None:
        watch = _watches[loop_key] = kind(hook_factory, namespace, label_selector)
    return watch  # type: ignore[return-value]  # made as kind(...) under this key


async def release(watch: NamespaceWatch, subscription: Subscription) -> None:
    """Unsubscribe; the last subscriber out stops the watch and closes its connection."""
    if watch.unsubscribe(subscription) == 0:
        for loop_key, candidate in list(_watches.items()):
            if candidate is watch:
                del _watches[loop_key]
        await watch.stop()


def active_watches(kind: type[NamespaceWatch] | None = None) -> int:
    """How many watch connections (of ``kind``) this process holds (benchmarks and tests)."""
    return sum(1 for watch in _watches.values() if kind is None or isinstance(watch, kind))

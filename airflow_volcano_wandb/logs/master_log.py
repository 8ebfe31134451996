"""Follow a job's master log into a task's log: from the triggerer while the task is deferred,
in the task's own process while it waits there (sync mode: the trigger's wait runs in-process,
follow included; a poking sensor: :class:`MasterLogThread`). One follow, wherever it runs.

Opt-in per job (``follow_master_log``): each following trigger holds one log stream of its
own, over one API client per event loop, connection and namespace (``log_client``); at most
``[volcano_wandb] max_concurrent_log_follows`` run at once per triggerer, the others wait for
a slot. The master pod is looked for in the namespace's shared pod watch (``pod_watcher``)
while it is synced, else by a LIST of the job's pods.

What follows the master (rank 0) pod's first container:

- Lines are joined across chunks, capped per job (``log_lines``), logged as ``[<pod>] <line>``;
  an ``AVW_PROGRESS`` record (docs/trainer.md) also as the progress line a W&B run gives.
- Until the master pod has started, it is looked for on each change of the job's progress
  and every ``RECHECK_SECONDS``.
- The kubelet ends a follow stream when the container exits. The pod is then looked at
  again: a restarted container (``restartCount`` grew) or a replacement pod is followed
  again. A stream that stays silent for ``RECHECK_SECONDS`` is checked the same way, since a
  stream may also outlive its container (a proxy that never closes it). A reopened stream
  replays the container's log: lines up to the last timestamp shown are skipped.
- Nothing here decides the wait: errors are logged and the follow retried, and the trigger
  cancels the follow when it fires or is cancelled.

Imported off the event loop by the trigger (it needs the Kubernetes clients).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf

from airflow_volcano_wandb.job.ownership import pods_managed
from airflow_volcano_wandb.logs.log_client import log_client
from airflow_volcano_wandb.logs.log_lines import (
    LineJoiner,
    LogCap,
    SeenLines,
    split_timestamp,
    stamp_seconds,
)
from airflow_volcano_wandb.logs.secret_digest import SecretDigest, mask_secrets
from airflow_volcano_wandb.template import master_task_name
from airflow_volcano_wandb.wait.diagnostics import started_master_pod
from airflow_volcano_wandb.wait.step_io import WatchedPods
from airflow_volcano_wandb.wait.training_progress import (
    Progress,
    ProgressSeen,
    keep_metrics,
    observe,
    record_metrics,
)
from airflow_volcano_wandb.wait.wake import set_within, within

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

#: Follows at once per triggerer when ``[volcano_wandb] max_concurrent_log_follows`` is unset.
DEFAULT_MAX_CONCURRENT_FOLLOWS = 50
#: Seconds between looks at the master pod while there is nothing to stream, and how long a
#: stream may stay silent before the pod is checked for a restart.
RECHECK_SECONDS = 30.0
#: Lines shown per turn of the event loop. A stream delivers a backlog at once (a reopened
#: stream, a trigger taking over from another triggerer: thousands of lines), and logging each
#: is synchronous (3 ms a line in a loaded triggerer pod); the triggerer's other triggers must
#: not wait for all of them.
SHOW_BATCH = 10

_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


@functools.cache
def max_concurrent_follows() -> int:
    """Read once per process: every trigger of a triggerer shares one limit."""
    fallback = DEFAULT_MAX_CONCURRENT_FOLLOWS
    return max(1, conf.getint("volcano_wandb", "max_concurrent_log_follows", fallback=fallback))


@contextlib.asynccontextmanager
async def follow_slot(log: logging.Logger | Any, what: str) -> AsyncIterator[None]:
    """One of the event loop's follow slots, said once in the log when it has to wait."""
    limit = max_concurrent_follows()
    slots = _slots.setdefault(asyncio.get_running_loop(), asyncio.Semaphore(limit))
    if slots.locked():
        log.info(
            "Waiting for a free master-log follow (at most %d at once per triggerer) for %s",
            limit,
            what,
        )
    async with slots:
        yield


async def follow_master_log(
    hook_factory: Callable[[], AsyncVolcanoHook],
    job_name: str,
    namespace: str,
    log: logging.Logger | Any,
    max_lines: int,
    max_bytes: int,
    masked: Sequence[SecretDigest] = (),
    job_changed: asyncio.Event | None = None,
    *,
    client_key: Hashable = None,
    pod_watch: WatchedPods | None = None,
    progress: bool = True,
    kept: dict[str, list[list[float]]] | None = None,
) -> None:
    """Log the master's lines, ``masked`` secrets masked, until the cap is reached or the
    caller cancels. ``job_changed``, set by the caller when the job's progress changes, makes
    a follow still waiting for the master pod look again at once; while ``pod_watch`` (the
    wait's, module doc) relists, the follow waits for its copies of the pods; ``progress``:
    ``AVW_PROGRESS`` records give progress lines (not when the wait reads W&B's), and their
    metrics go into ``kept`` (``training_progress.keep_metrics``) for the finished wait."""
    async with follow_slot(log, f"{namespace}/{job_name}"):
        cap = LogCap(max_lines, max_bytes)
        master_log = _MasterLog(hook_factory, job_name, namespace, log, cap, masked, job_changed)
        master_log.progress = ProgressSeen() if progress else None
        master_log.kept = {} if kept is None else kept
        await master_log.run(client_key, pod_watch)


def _key(pod: dict) -> tuple[str, int]:
    """Which container incarnation: the pod's uid and its first container's restarts."""
    return pod["metadata"]["uid"], int(_status(pod).get("restartCount", 0))


def _container(pod: dict) -> str:
    return pod["spec"]["containers"][0]["name"]


def _status(pod: dict) -> dict:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == _container(pod)), {})


def _running(pod: dict) -> bool:
    return "running" in (_status(pod).get("state") or {})


class _MasterLog:
    def __init__(
        self,
        hook_factory: Callable[[], AsyncVolcanoHook],
        job_name: str,
        namespace: str,
        log: logging.Logger | Any,
        cap: LogCap,
        masked: Sequence[SecretDigest],
        job_changed: asyncio.Event | None,
    ) -> None:
        self._hook_factory, self._job_name, self._namespace = hook_factory, job_name, namespace
        self._log, self._cap, self._masked = log, cap, tuple(masked)
        self._job_changed = job_changed or asyncio.Event()
        self._seen: dict[str, SeenLines] = {}  # per pod uid
        self._streamed: tuple[str, int] | None = None
        self._failures, self._done = 0, False
        self._pod_watch: WatchedPods | None = None
        #: What the ``AVW_PROGRESS`` records told; ``None``: they are not read.
        self.progress: ProgressSeen | None = ProgressSeen()
        #: The records' metrics, sampled, step by step (``training_progress.keep_metrics``).
        self.kept: dict[str, list[list[float]]] = {}

    async def run(self, client_key: Hashable = None, pod_watch: WatchedPods | None = None) -> None:
        while not (self._done or self._cap.reached):
            try:
                async with log_client(client_key, self._namespace, self._hook_factory) as client:
                    try:
                        await self._follow(client.hook, client.api, pod_watch)
                    except Exception:
                        await client.let_go()  # the next try loads fresh credentials
                        raise
            except Exception as exc:  # not a cancellation (a BaseException)
                # The first failure of a run is worth a warning; repeats would flood the log.
                self._log.log(
                    logging.WARNING if self._failures == 0 else logging.DEBUG,
                    "Following the master log of %s/%s failed (%s); retrying in %.0fs",
                    self._namespace,
                    self._job_name,
                    exc,
                    RECHECK_SECONDS,
                )
                self._failures += 1
                await asyncio.sleep(RECHECK_SECONDS)

    async def _follow(
        self, hook: AsyncVolcanoHook, api: Any, pod_watch: WatchedPods | None
    ) -> None:
        job = await hook.read_job(api, self._job_name, self._namespace)
        master = master_task_name(job) if job is not None else None
        if master is None:
            self._log.debug("No master task in %s/%s to follow", self._namespace, self._job_name)
            self._done = True
            return
        self._pod_watch = pod_watch if pods_managed(job) else None
        while not self._cap.reached:
            self._job_changed.clear()  # before the look: a change after it wakes the wait below
            pod = await self._master_pod(hook, api, master)
            if pod is not None and (_key(pod) != self._streamed or _running(pod)):
                if self._streamed is not None and _key(pod) != self._streamed:
                    self._log.info(
                        "Following the log of %s again: %s",
                        pod["metadata"]["name"],
                        "a new pod" if _key(pod)[0] != self._streamed[0] else "it restarted",
                    )
                self._streamed = _key(pod)
                await self._stream(hook, api, pod, master)
                self._failures = 0
                await asyncio.sleep(1)  # a stream cut at once must not be reopened in a loop
            else:
                await set_within(self._job_changed, RECHECK_SECONDS)

    async def _master_pod(self, hook: AsyncVolcanoHook, api: Any, master: str) -> dict | None:
        watch = self._pod_watch
        pods = watch.objects(self._job_name) if watch is not None else None
        if pods is None and watch is not None and watch.listing:
            return None  # its copies come with the LIST under way: no LIST of our own racing it
        if pods is None:
            pods = await hook.list_job_pods(api, self._job_name, self._namespace)
        return started_master_pod(pods, master)

    async def _stream(self, hook: AsyncVolcanoHook, api: Any, pod: dict, master: str) -> None:
        """Show the pod's new lines until the stream ends or the container was replaced."""
        name, uid = pod["metadata"]["name"], pod["metadata"]["uid"]
        seen = self._seen.setdefault(uid, SeenLines())
        seen.reopened()
        joiner = LineJoiner()
        response = await hook.open_pod_log(api, name, self._namespace, _container(pod))
        try:
            while not self._cap.reached:
                try:
                    chunk = await within(response.content.readany(), RECHECK_SECONDS)
                except TimeoutError:
                    if self._pod_watch is not None and self._pod_watch.listing:
                        continue  # the pod watch relists: nothing says the master changed
                    current = await self._master_pod(hook, api, master)
                    if current is None or _key(current) != self._streamed:
                        return
                    continue
                if not chunk:
                    self._show(name, seen, joiner.flush())
                    return
                lines = joiner.feed(chunk)
                for start in range(0, len(lines), SHOW_BATCH):
                    self._show(name, seen, lines[start : start + SHOW_BATCH])
                    await asyncio.sleep(0)
        finally:
            response.close()

    def _show(self, pod: str, seen: SeenLines, lines: list[str]) -> None:
        for line in lines:
            stamp, text = split_timestamp(line)
            if not seen.is_new(stamp):
                continue
            text = mask_secrets(text, self._masked)
            shown, notice = self._cap.admit(text)
            if shown or notice:
                self._log.info("[%s] %s", pod, text if shown else notice)
            if self.progress is not None:
                self._show_progress(text, stamp, self.progress)

    def _show_progress(self, text: str, stamp: tuple[str, int] | None, seen: ProgressSeen) -> None:
        """An ``AVW_PROGRESS`` record's line when due, timed by its stamp (a backlog's too)."""
        at = time.time() if stamp is None else stamp_seconds(stamp)
        if (now := Progress.of_log_line(text, at)) is not None:
            keep_metrics(self.kept, now.step, record_metrics(text))
            self.progress, said = observe(seen, now, at)
            if said is not None:
                self._log.info("%s", said)


class MasterLogThread(threading.Thread):
    """:func:`follow_master_log` (its arguments but ``job_changed``) on an event loop of its
    own, for a task waiting in its own process; ``stop()`` cancels it within ``STOP_WAIT``
    seconds (a stream returns only when a line arrives or the container ends). No watch wakes
    it: while it waits for the master pod, it looks again every ``LOOK_SECONDS``."""

    STOP_WAIT = 5.0
    LOOK_SECONDS = 2.0

    def __init__(
        self,
        hook_factory: Callable[[], AsyncVolcanoHook],
        job_name: str,
        namespace: str,
        *follow: Any,
        **named: Any,
    ) -> None:
        super().__init__(name=f"master-log-{namespace}-{job_name}", daemon=True)
        self._follow: Callable[..., Awaitable[None]] = functools.partial(
            follow_master_log, hook_factory, job_name, namespace, *follow, **named
        )
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task | None = None
        self._stopped = False

    def run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._task = self._loop.create_task(self._follow_looking_again())
            if self._stopped:  # stop() came before the task existed
                self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                self._loop.run_until_complete(self._task)
        finally:
            self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            self._loop.close()

    async def _follow_looking_again(self) -> None:
        job_changed = asyncio.Event()

        async def look_again() -> None:
            while True:
                await asyncio.sleep(self.LOOK_SECONDS)
                job_changed.set()

        ticker = asyncio.create_task(look_again())
        try:
            await self._follow(job_changed=job_changed)
        finally:
            ticker.cancel()

    def stop(self) -> None:
        """Cancel the follow (its stream is closed as it unwinds) and wait for the thread."""
        self._stopped = True
        with contextlib.suppress(RuntimeError):  # the loop already closed: nothing to cancel
            self._loop.call_soon_threadsafe(self._cancel)
        self.join(timeout=self.STOP_WAIT)

    def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

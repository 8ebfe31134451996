"""The deferrable wait on a Volcano job: a watch, not a poll."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_volcano_wandb import airflow_compat
from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR, selector_matches
from airflow_volcano_wandb.logs.log_lines import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.triggers import kill
from airflow_volcano_wandb.triggers.off_loop import kubernetes_side
from airflow_volcano_wandb.wait import restart_check
from airflow_volcano_wandb.wait.judge import (
    WaitTarget,
    gang_is_whole,
    gang_whole_mark,
    judge,
    needs_gang_whole_mark,
    progress_line,
)
from airflow_volcano_wandb.wait.outcome import Outcome, WaitResult

#: Ten minutes: longer than a RoleBinding re-applied by Helm or Argo CD stays missing.
DEFAULT_WATCH_FAILURE_GRACE = 600.0
#: How long after a deferral its trigger may fire at the earliest, unless ``[volcano_wandb]
#: defer_settle_seconds`` says otherwise. Airflow (3.0 to 3.3.2) fails a deferred task whose
#: trigger fired before the scheduler had processed the deferring worker's exit, as if killed
#: externally (apache/airflow#66374, #67287, #72716): a job ending within seconds of the
#: deferral would lose its success, or its typed failure.
DEFAULT_DEFER_SETTLE_SECONDS = 15.0


def defer_settle_seconds() -> float:
    """``[volcano_wandb] defer_settle_seconds`` of this (triggerer) process."""
    configured = conf.getfloat(
        "volcano_wandb", "defer_settle_seconds", fallback=DEFAULT_DEFER_SETTLE_SECONDS
    )
    return max(0.0, configured)


if TYPE_CHECKING:
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
    from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher, Subscription


class VolcanoJobTrigger(BaseTrigger):
    """Fire once when a Volcano job ends, is deleted, or overstays a timeout.

    All triggers for jobs in one namespace (and one connection) in a triggerer share one
    list+watch connection (``job_watcher``), so a thousand waiting jobs cost one connection
    and no polling. The event is a ``WaitResult`` (``outcome.py``) judged by ``judge.py``;
    the operator or sensor turns it into the task's outcome and its diagnostics.

    :param job_name: the Volcano job to wait on.
    :param namespace: its namespace.
    :param job_uid: the uid of the submission waited on; a job recreated under the same name
        by someone else counts as the original being deleted.
    :param kubernetes_conn_id: the ``kubernetes`` connection (cncf.kubernetes semantics).
    :param pending_timeout: seconds until every rank must be placed and running.
    :param deadline: wall-clock time (epoch seconds) at which to give up, for
        ``execution_timeout``.
    :param poll_interval: seconds between progress checks of the timeouts; the job's state
        itself arrives through the watch as soon as Volcano sets it.
    :param delete_on_kill: delete the job when a user kills, clears or fails the deferred task.
    :param watch_failure_grace: seconds the list/watch may keep failing (403, 401, 404,
        5xx, timeouts; each retried with backoff) before the task fails, without touching
        the job (the next try reattaches).
    :param watch_selector: label selector of the shared watch; by default only the jobs
        this provider manages are cached. A job outside it (submitted by something else) is
        followed on the namespace's unfiltered watch; ``None`` starts there.
    :param try_number: the try that waits; a kill deletes the job only while no newer try
        has adopted it.
    :param follow_master_log: also log the master pod's lines while waiting (``master_log``);
        never changes the outcome.
    :param master_log_max_lines: at most this many master log lines for the job.
    :param master_log_max_bytes: at most this many bytes of master log for the job.
    :param masked_secrets: secrets to mask in the followed log, as digests
        (``SecretDigest.to_json``): the secrets themselves never reach the trigger.
    :param deferred_at: when the task deferred to this trigger (epoch seconds): it fires no
        sooner than ``defer_settle_seconds()`` later. ``None``: not deferred (the sync wait).
    :param max_container_restarts: the restart budget (``restart_check``); ``None``: none.
    """

    def __init__(
        self,
        job_name: str,
        namespace: str,
        job_uid: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        pending_timeout: float | None = None,
        deadline: float | None = None,
        poll_interval: float = 10.0,
        delete_on_kill: bool = True,
        watch_failure_grace: float = DEFAULT_WATCH_FAILURE_GRACE,
        watch_selector: str | None = MANAGED_SELECTOR,
        try_number: int | None = None,
        follow_master_log: bool = False,
        master_log_max_lines: int = DEFAULT_MAX_LINES,
        master_log_max_bytes: int = DEFAULT_MAX_BYTES,
        masked_secrets: list[dict[str, Any]] | None = None,
        deferred_at: float | None = None,
        max_container_restarts: int | None = None,
    ) -> None:
        super().__init__()
        self.job_name = job_name
        self.namespace = namespace
        self.job_uid = job_uid
        self.kubernetes_conn_id = kubernetes_conn_id
        self.config_file = config_file
        self.cluster_context = cluster_context
        self.in_cluster = in_cluster
        self.pending_timeout = pending_timeout
        self.deadline = deadline
        self.poll_interval = poll_interval
        self.delete_on_kill = delete_on_kill
        self.watch_failure_grace = watch_failure_grace
        self.watch_selector = watch_selector
        self.try_number = try_number
        self.follow_master_log = follow_master_log
        self.master_log_max_lines = master_log_max_lines
        self.master_log_max_bytes = master_log_max_bytes
        self.masked_secrets = list(masked_secrets or [])
        self.deferred_at = deferred_at
        self.max_container_restarts = max_container_restarts
        self._fired = False
        self._last_progress = ""
        self._progress_changed = asyncio.Event()  # wakes the master-log follow
        self._gang_seen_whole = False
        #: The failing watch's fallback: when the job was last read directly, and whether the
        #: apiserver answered.
        self._direct_read_at: float | None = None
        self._direct_read_answered = False

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return (
            f"{type(self).__module__}.{type(self).__qualname__}",
            {
                "job_name": self.job_name,
                "namespace": self.namespace,
                "job_uid": self.job_uid,
                "kubernetes_conn_id": self.kubernetes_conn_id,
                "config_file": self.config_file,
                "cluster_context": self.cluster_context,
                "in_cluster": self.in_cluster,
                "pending_timeout": self.pending_timeout,
                "deadline": self.deadline,
                "poll_interval": self.poll_interval,
                "delete_on_kill": self.delete_on_kill,
                "watch_failure_grace": self.watch_failure_grace,
                "watch_selector": self.watch_selector,
                "try_number": self.try_number,
                "follow_master_log": self.follow_master_log,
                "master_log_max_lines": self.master_log_max_lines,
                "master_log_max_bytes": self.master_log_max_bytes,
                "masked_secrets": self.masked_secrets,
                "deferred_at": self.deferred_at,
                "max_container_restarts": self.max_container_restarts,
            },
        )

    def hook(self) -> AsyncVolcanoHook:
        from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

        return AsyncVolcanoHook(
            conn_id=self.kubernetes_conn_id,
            config_file=self.config_file,
            cluster_context=self.cluster_context,
            in_cluster=self.in_cluster,
        )

    def _connection_key(self) -> tuple:
        return (self.kubernetes_conn_id, self.config_file, self.cluster_context, self.in_cluster)

    def _target(self) -> WaitTarget:
        return WaitTarget(
            name=self.job_name,
            namespace=self.namespace,
            uid=self.job_uid,
            pending_timeout=self.pending_timeout,
            deadline=self.deadline,
            max_container_restarts=self.max_container_restarts,
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.delete_on_kill and self.task_instance is not None:  # in a triggerer, not sync
            airflow_compat.warn_if_no_trigger_on_kill()
        started = time.monotonic()
        job_watcher = await kubernetes_side()
        follow = await self._start_log_follow()
        try:
            result = await self._watch(job_watcher)
            if self.deferred_at is not None:  # the master log is still followed meanwhile
                await asyncio.sleep(self._settle_left(started))
        finally:
            if follow is not None:  # ends with the wait, whatever ended the wait
                follow.cancel()
                await asyncio.gather(follow, return_exceptions=True)
        self._fired = True
        yield TriggerEvent(result.to_event())

    def _settle_left(self, started: float) -> float:
        """How much longer the deferral must settle before the trigger fires.

        At most the setting after the trigger's own start, on this process's monotonic clock:
        a worker clock ahead of the triggerer's (``deferred_at`` is the worker's) cannot
        lengthen it, nor a jump of the wall clock.
        """
        settle = defer_settle_seconds()
        by_own_clock = settle - (time.monotonic() - started)
        by_deferral = (self.deferred_at or 0.0) + settle - time.time()
        return max(0.0, min(by_own_clock, by_deferral))

    async def _watch(self, job_watcher: ModuleType) -> WaitResult:
        selector = self.watch_selector
        while True:
            watcher = job_watcher.shared_watcher(
                self._connection_key(), self.namespace, self.hook, selector
            )
            subscription = watcher.subscribe(self.job_name)
            try:
                result = await self._wait(watcher, subscription, selector)
            finally:
                await job_watcher.release(watcher, subscription)
            if result is not None:
                return result
            # A job this provider did not submit (e.g. for the sensor) is outside the watch of
            # managed jobs: follow it on the namespace's unfiltered watch instead.
            selector = None

    async def _start_log_follow(self) -> asyncio.Task | None:
        """The master log's follow, for a job that asked for it; its own task, so that
        nothing it does (or fails to do) can delay or change the wait."""
        if not self.follow_master_log:
            return None
        master_log = await kubernetes_side("airflow_volcano_wandb.logs.master_log")
        return asyncio.create_task(
            master_log.follow_master_log(
                self.hook,
                self.job_name,
                self.namespace,
                self.log,
                self.master_log_max_lines,
                self.master_log_max_bytes,
                [SecretDigest.from_json(digest) for digest in self.masked_secrets],
                self._progress_changed,
            ),
            name=f"volcano-master-log-{self.namespace}-{self.job_name}",
        )

    async def _wait(
        self, watcher: NamespaceJobWatcher, subscription: Subscription, selector: str | None
    ) -> WaitResult | None:
        """The wait's result; ``None`` when the job is outside this watch's ``selector``.

        While the watch is up, the job is judged on its cached copy. While it is failing, the
        job is read directly, at most once per ``poll_interval``: a watch cut every few seconds
        (an idle-timeout proxy) never stays up, but the apiserver still answers, and verdicts
        keep coming. Only when the direct reads fail too for ``watch_failure_grace`` does the
        wait end as a lost watch.
        """
        target = self._target()
        while True:
            subscription.changed.clear()
            fresh = True
            if watcher.synced.is_set():
                job = watcher.job(self.job_name)
                if job is not None and self._is_ours(job):
                    fresh = False
                else:  # the watch may not have delivered a just-created job yet: ask directly
                    job = await self._fetch(watcher)
            elif self._direct_read_due(watcher):
                job = await self._fetch(watcher)
                self._direct_read_at = time.monotonic()
                self._direct_read_answered = job is not _UNKNOWN
            else:
                job = _UNKNOWN
            if fresh and job not in (None, _UNKNOWN) and not selector_matches(selector, job):
                return None
            if job is not _UNKNOWN:
                result = await self._judge(watcher, job, target, fresh)
                if result is not None:
                    return result
            elif self._apiserver_lost(watcher):
                return self._watch_lost(watcher.last_failure)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(subscription.changed.wait(), timeout=self._sleep_for())

    async def _judge(
        self, watcher: NamespaceJobWatcher, job: dict | None, target: WaitTarget, fresh: bool
    ) -> WaitResult | None:
        """Judge ``job``; a verdict that deletes or fails, judged on a cached copy, is judged
        again on a fresh GET (a watch outage may have hidden the job's real end)."""
        if job is not None:
            if not self._gang_seen_whole and gang_is_whole(job):  # once per trigger
                self._gang_seen_whole = True
                await self._mark_gang_whole(watcher, job)
            self._log_progress(job)
        result = judge(job, target, time.time(), gang_seen_whole=self._gang_seen_whole)
        if result is None:  # a running job's pods may be crash-looping (confirmed there)
            return await restart_check.verdict(watcher, job, target, self.log)
        if result.outcome not in _CONFIRMED_OUTCOMES or fresh:
            return result
        confirmed = await self._fetch(watcher)
        if confirmed is _UNKNOWN:  # never destroy on a guess: wait, and read again
            return None
        return judge(confirmed, target, time.time(), gang_seen_whole=self._gang_seen_whole)

    async def _mark_gang_whole(self, watcher: NamespaceJobWatcher, job: dict) -> None:
        """Record on the job, once, that its gang was whole (``judge.GANG_WHOLE_ANNOTATION``):
        a later waiter (after a restart or a handover, a reattaching retry, a poke) reads it,
        so a rank lost afterwards is never taken for a gang that was never placed."""
        if needs_gang_whole_mark(job):
            try:
                await watcher.annotate(job, gang_whole_mark(time.time()))
            except Exception as exc:  # this trigger remembers; the next one looks again
                self.log.warning("Could not record the whole gang on the job: %s", exc)

    def _direct_read_due(self, watcher: NamespaceJobWatcher) -> bool:
        """Whether the failing watch calls for reading the job directly now."""
        if watcher.failing_since is None:
            return False  # a relist in progress: its end wakes this wait
        last = self._direct_read_at
        return last is None or time.monotonic() - last >= self.poll_interval

    def _apiserver_lost(self, watcher: NamespaceJobWatcher) -> bool:
        """The watch has failed for ``watch_failure_grace`` and the last direct read too."""
        failing_since = watcher.failing_since
        return (
            failing_since is not None
            and not self._direct_read_answered
            and time.monotonic() - failing_since >= self.watch_failure_grace
        )

    async def _fetch(self, watcher: NamespaceJobWatcher) -> Any:
        """The job from the apiserver (``None``: it does not exist, or not this submission);
        ``_UNKNOWN`` when the apiserver could not be asked."""
        try:
            job = await watcher.fetch(self.job_name)
        except Exception as exc:
            self.log.warning(
                "Could not read Volcano job %s/%s: %s", self.namespace, self.job_name, exc
            )
            return _UNKNOWN
        return job if job is not None and self._is_ours(job) else None

    def _log_progress(self, job: dict) -> None:
        progress = progress_line(job, gang_seen_whole=self._gang_seen_whole)
        if progress != self._last_progress:
            self._last_progress = progress
            self.log.info("%s", progress)
            self._progress_changed.set()

    def _watch_lost(self, why: str) -> WaitResult:
        return WaitResult(
            outcome=Outcome.WATCH_LOST,
            name=self.job_name,
            namespace=self.namespace,
            uid=self.job_uid or "",
            message=(
                f"Lost the watch on Volcano job {self.namespace}/{self.job_name}: {why}. The "
                "job was left untouched; the next try reattaches to it."
            ),
        )

    def _is_ours(self, job: dict) -> bool:
        return not self.job_uid or job["metadata"].get("uid") == self.job_uid

    def _sleep_for(self) -> float:
        wake = self.poll_interval
        if self.deadline is not None and self.deadline > time.time():
            wake = min(wake, max(self.deadline - time.time(), 0.05))
        return wake

    async def on_kill(self) -> None:
        """The triggerer stopped this trigger "by user action" (Airflow 3.3 and later).

        That is not always a user's kill: Airflow 3.3 cancels a trigger with the same message
        when it moves to another triggerer (a triggerer whose heartbeat lapsed loses its
        triggers to a healthy one). So the job is deleted only when Airflow confirms that the
        task has left ``deferred`` (killed, cleared or marked); older releases go through
        :meth:`cleanup` with the same check.
        """
        if self._fired or not self.delete_on_kill:
            return
        await kill.stop_waiting(self)

    async def cleanup(self) -> None:
        """Airflow < 3.3: the same as :meth:`on_kill`.

        Those releases never call ``on_kill``: they cancel the trigger and call ``cleanup()``
        whether a user acted on the task or the triggerer itself is stopping or handing the
        trigger over (when the job must be left to the next triggerer).
        """
        if airflow_compat.TRIGGER_ON_KILL or self._fired or not self.delete_on_kill:
            return
        await kill.stop_waiting(self)


# Verdicts that end in a deletion or a failed task: confirmed by a fresh GET first.
_CONFIRMED_OUTCOMES = frozenset(
    {Outcome.FAILED, Outcome.DELETED, Outcome.PENDING_TIMEOUT, Outcome.TIMEOUT}
)
# The apiserver could not be asked: neither a job nor its absence.
_UNKNOWN: Any = object()

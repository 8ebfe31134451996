"""The deferrable wait on a Volcano job: a watch, not a poll."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf
from airflow.triggers.base import BaseTrigger, TriggerEvent

from airflow_volcano_wandb import airflow_compat
from airflow_volcano_wandb.job.ownership import selector_matches
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.triggers import kill
from airflow_volcano_wandb.triggers.off_loop import kubernetes_side
from airflow_volcano_wandb.triggers.wait_spec import WaitSpec
from airflow_volcano_wandb.wait import step_io
from airflow_volcano_wandb.wait.judge import DEFAULT_POD_CHECK_INTERVAL, JobTarget, may_read_pods
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.step import StepMemory
from airflow_volcano_wandb.wait.training_progress import READ_INTERVAL
from airflow_volcano_wandb.wait.wake import set_within
from airflow_volcano_wandb.wait.wandb_progress import WandbProgress

#: How long after a deferral its trigger may fire at the earliest, unless ``[volcano_wandb]
#: defer_settle_seconds`` says otherwise. Airflow (3.0 to 3.3.2) fails a deferred task whose
#: trigger fired before the scheduler had processed the deferring worker's exit, as if killed
#: externally (apache/airflow#66374, #67287, #72716): a job ending within seconds of the
#: deferral would lose its success, or its typed failure.
DEFAULT_DEFER_SETTLE_SECONDS = 15.0


# The ``[volcano_wandb]`` settings of this (triggerer or worker) process.
def _seconds(key: str, default: float, least: float) -> float:
    return max(least, conf.getfloat("volcano_wandb", key, fallback=default))


def defer_settle_seconds() -> float:
    return _seconds("defer_settle_seconds", DEFAULT_DEFER_SETTLE_SECONDS, 0.0)


def pod_check_interval() -> float:
    return _seconds("pod_check_interval", DEFAULT_POD_CHECK_INTERVAL, 1.0)


def progress_interval() -> float:
    return _seconds("progress_interval", READ_INTERVAL, 1.0)


def pod_watch() -> bool:
    return conf.getboolean("volcano_wandb", "pod_watch", fallback=True)


def target_here(spec: WaitSpec) -> JobTarget:
    """The job and limits of ``spec`` as this process judges them, with its settings: the
    trigger's and the sensor's alike."""
    return dataclasses.replace(
        spec.target(),
        pod_check_interval=pod_check_interval(),
        progress_annotation=conf.getboolean("volcano_wandb", "progress_annotation", fallback=False),
        progress_interval=progress_interval(),
    )


if TYPE_CHECKING:
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
    from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher
    from airflow_volcano_wandb.wait.namespace_watch import Subscription
    from airflow_volcano_wandb.wait.pod_watcher import NamespacePodWatcher


class VolcanoJobTrigger(BaseTrigger):
    """Fire once when a Volcano job ends, is deleted, or overstays a timeout.

    All triggers for jobs in one namespace (and one connection) in a triggerer share one
    list+watch connection (``job_watcher``), so a thousand waiting jobs cost one connection
    and no polling. The event is a ``WaitResult`` (``outcome.py``) judged by ``judge.py``.
    Its fields are one ``WaitSpec`` (``wait_spec.py``), taken and stored by name.
    """

    def __init__(self, job_name: str, namespace: str, **fields: Any) -> None:
        super().__init__()
        self.spec = WaitSpec.from_kwargs({"job_name": job_name, "namespace": namespace, **fields})
        self._fired = False
        self._memory = StepMemory()
        run = self.spec.wandb_run()
        # Asked for its last step (the stall timeout) and whether it was stopped.
        self._wandb = WandbProgress(run) if run is not None else None
        self._progress_changed = asyncio.Event()  # wakes the master-log follow
        #: The master log's records' metrics, sampled, for the finished wait to keep.
        self._kept_metrics: dict[str, list[list[float]]] = {}
        #: The failing watch's fallback: when the job was last read directly, and when a direct
        #: read was last answered (monotonic).
        self._direct_read_at: float | None = None
        self._direct_read_answered_at: float | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__qualname__}", self.spec.to_kwargs()

    # What ``kill.StoppedTrigger`` reads of a trigger, and the sync wait's error names.
    job_name = property(lambda self: self.spec.job_name)
    namespace = property(lambda self: self.spec.namespace)
    job_uid = property(lambda self: self.spec.job_uid)
    try_number = property(lambda self: self.spec.try_number)

    def hook(self) -> AsyncVolcanoHook:
        from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

        return AsyncVolcanoHook(**self.spec.connection_kwargs())

    async def run(self) -> AsyncIterator[TriggerEvent]:
        if self.spec.delete_on_kill and self.task_instance is not None:  # in a triggerer, not sync
            airflow_compat.warn_if_no_trigger_on_kill()
        started = time.monotonic()
        job_watcher = await kubernetes_side()
        pods = self._watch_pods(job_watcher)
        pod_watch = pods[0] if pods is not None else None
        follow = await self._start_log_follow(pod_watch)
        try:
            result = await self._watch(job_watcher, pod_watch)
            if self.spec.deferred_at is not None:  # the master log is still followed meanwhile
                await asyncio.sleep(self._settle_left(started))
        finally:
            if follow is not None:  # ends with the wait, whatever ended the wait
                follow.cancel()
                await asyncio.gather(follow, return_exceptions=True)
            if pods is not None:
                await job_watcher.release(*pods)
        self._fired = True
        yield TriggerEvent(dataclasses.replace(result, metrics=self._kept_metrics).to_event())

    def _settle_left(self, started: float) -> float:
        """How much longer the deferral must settle before the trigger fires: at most the
        setting after the trigger's own start, on this process's monotonic clock, so neither
        a worker clock ahead of the triggerer's (``deferred_at`` is the worker's) nor a jump of
        the wall clock lengthens it."""
        settle = defer_settle_seconds()
        by_own_clock = settle - (time.monotonic() - started)
        by_deferral = (self.spec.deferred_at or 0.0) + settle - time.time()
        return max(0.0, min(by_own_clock, by_deferral))

    def _watch_pods(self, job_watcher: ModuleType) -> tuple[NamespacePodWatcher, Any] | None:
        """The namespace's shared pod watch, subscribed to, for a wait that reads the pods of a
        job this provider submitted; ``None`` when there is nothing to read or ``pod_watch`` is
        off (then each read is a LIST)."""
        spec = self.spec
        reads_pods = spec.follow_master_log or may_read_pods(spec.target())
        if not (reads_pods and spec.watch_selector and pod_watch()):
            return None
        pods = job_watcher.shared_pod_watcher(spec.connection_key(), self.namespace, self.hook)
        return pods, pods.subscribe(self.job_name)

    async def _watch(self, job_watcher: ModuleType, pods: NamespacePodWatcher | None) -> WaitResult:
        selector = self.spec.watch_selector
        while True:
            watcher = job_watcher.shared_watcher(
                self.spec.connection_key(), self.namespace, self.hook, selector
            )
            subscription = watcher.subscribe(self.job_name)
            try:
                result = await self._wait(watcher, subscription, selector, pods)
            finally:
                await job_watcher.release(watcher, subscription)
            if result is not None:
                return result
            # A job this provider did not submit (e.g. for the sensor) is outside the watch of
            # managed jobs: follow it on the namespace's unfiltered watch instead.
            selector = None

    async def _start_log_follow(self, pods: NamespacePodWatcher | None) -> asyncio.Task | None:
        """The master log's follow, when asked for: its own task, so that nothing it does can
        delay or change the wait; it finds the master pod in ``pods`` while that is synced."""
        spec = self.spec
        if not spec.follow_master_log:
            return None
        master_log = await kubernetes_side("airflow_volcano_wandb.logs.master_log")
        return asyncio.create_task(
            master_log.follow_master_log(
                self.hook,
                spec.job_name,
                spec.namespace,
                self.log,
                spec.master_log_max_lines,
                spec.master_log_max_bytes,
                [SecretDigest.from_json(digest) for digest in spec.masked_secrets],
                self._progress_changed,
                client_key=spec.connection_key(),
                pod_watch=pods,
                progress=self._wandb is None,  # the log's records, unless W&B's run tells
                kept=self._kept_metrics,
            ),
            name=f"volcano-master-log-{self.namespace}-{self.job_name}",
        )

    async def _wait(
        self,
        watcher: NamespaceJobWatcher,
        subscription: Subscription,
        selector: str | None,
        pods: step_io.WatchedPods | None,
    ) -> WaitResult | None:
        """The wait's result; ``None`` when the job is outside this watch's ``selector``. Each
        step reads the job's pods from ``pods``, this wait's own pod watch (``None``: none).
        While the watch fails, the job is read directly once per ``poll_interval`` (an
        idle-timeout proxy may cut every watch, not the reads: docs/operator.md)."""
        target = target_here(self.spec)
        while True:
            subscription.changed.clear()
            fresh = True
            if watcher.synced.is_set():
                job = watcher.job(self.job_name)
                if job is not None and self.spec.is_ours(job):
                    fresh = False
                else:  # the watch may not have delivered a just-created job yet: ask directly
                    job = await step_io.fetch(watcher, target, self.log)
            elif self._direct_read_due(watcher):
                job = await step_io.fetch(watcher, target, self.log)
                self._direct_read_at = time.monotonic()
                if job is not step_io.UNKNOWN:
                    self._direct_read_answered_at = self._direct_read_at
            else:
                job = step_io.UNKNOWN
            if fresh and job not in (None, step_io.UNKNOWN) and not selector_matches(selector, job):
                return None
            if job is not step_io.UNKNOWN:
                result = await self._step(watcher, job, target, fresh, pods)
                if result is not None:
                    return result
            elif self._apiserver_lost(watcher):
                why = watcher.last_failure
                return WaitResult.watch_lost(self.job_name, self.namespace, self.job_uid or "", why)
            await set_within(subscription.changed, self._sleep_for())

    async def _step(
        self,
        watcher: NamespaceJobWatcher,
        job: dict | None,
        target: JobTarget,
        fresh: bool,
        pods: step_io.WatchedPods | None,
    ) -> WaitResult | None:
        """One look at ``job`` (``wait/step_io``); a changed progress wakes the log follow."""
        before = self._memory.progress
        self._memory, result = await step_io.take_step(
            watcher,
            job,
            target,
            self._memory,
            self.log,
            fresh=fresh,
            pod_watch=pods,
            wandb=self._wandb,
        )
        if self._memory.progress != before:
            self._progress_changed.set()
        return result

    def _direct_read_due(self, watcher: NamespaceJobWatcher) -> bool:
        """Whether the failing watch calls for reading the job directly now."""
        if watcher.failing_since is None:
            return False  # a relist in progress: its end wakes this wait
        last = self._direct_read_at
        return last is None or time.monotonic() - last >= self.spec.poll_interval

    def _apiserver_lost(self, watcher: NamespaceJobWatcher) -> bool:
        """The watch has failed for ``watch_failure_grace``, and no direct read was answered in
        that time either (one read lost to a blip between answered ones is no outage)."""
        failing_since = watcher.failing_since
        if failing_since is None:
            return False
        heard = max(failing_since, self._direct_read_answered_at or failing_since)
        return time.monotonic() - heard >= self.spec.watch_failure_grace

    def _sleep_for(self) -> float:
        wake, deadline = self.spec.poll_interval, self.spec.deadline
        if deadline is not None and deadline > time.time():
            wake = min(wake, max(deadline - time.time(), 0.05))
        read_at = self._memory.progress_read_at
        if self._wandb is not None and read_at is not None:  # the next progress read is due
            wake = min(wake, max(read_at + progress_interval() - time.time(), 0.05))
        return wake

    async def on_kill(self) -> None:
        """The triggerer stopped this trigger "by user action" (Airflow 3.3 and later), which
        it also says when the trigger moves to another triggerer: so the job is deleted only
        when Airflow confirms that the task has left ``deferred`` (``kill``)."""
        if self._fired or not self.spec.delete_on_kill:
            return
        await kill.stop_waiting(self)

    async def cleanup(self) -> None:
        """Airflow < 3.3, which never calls ``on_kill``: the same, since those releases call
        ``cleanup()`` whether a user acted on the task or the triggerer is stopping or handing
        the trigger over (when the job must be left to the next triggerer)."""
        if not airflow_compat.TRIGGER_ON_KILL:
            await self.on_kill()

"""One step of a wait, carried out: the look (``step.look``), then its write and its reads.

The trigger runs :func:`take_step` over its shared watch (``NamespaceJobWatcher`` has the calls
:class:`JobCalls` names), the sensor's poke over the sync hook (:func:`take_step_sync`), so both
log the same lines and reach the same verdicts (docs/architecture.md). Each wait hands the step
the pod watch it reads (:class:`WatchedPods`; ``None``: none), so no wait's reads rest on what
another wait set on the watch they share.

A verdict read from the pods (a crash loop, a container that cannot start, a silent master)
ends the wait, and deletes the job, only once a fresh GET of the job and a fresh LIST of its
pods show it again (:func:`_confirmed`); a stall after a second probe of the master's log too.
The trigger's limits default to ``None`` (off): a trigger serialised by a release without them
keeps waiting as it did.

Imports nothing of the Kubernetes clients: the trigger module that uses it is imported on the
triggerer's event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from airflow_volcano_wandb.job.ownership import pods_managed
from airflow_volcano_wandb.wait.judge import JobTarget, Seen, judge, judge_pods, judge_stall, see
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.stall import Stall, stalled, stalled_online
from airflow_volcano_wandb.wait.step import Look, StepMemory, look, stall_probe
from airflow_volcano_wandb.wait.training_progress import PROGRESS_ANNOTATION, observe
from airflow_volcano_wandb.wait.wandb_progress import WandbProgress
from airflow_volcano_wandb.wait.wandb_stop import STOPPED_BY, stop_seen_at, stop_seen_mark

if TYPE_CHECKING:  # the hook imports Airflow's; a type is all this module needs of it
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

#: The apiserver could not be asked: neither a job nor its absence.
UNKNOWN: Any = object()


class JobCalls(Protocol):
    """The calls a step makes about the job waited on; any of them may raise."""

    async def fetch(self, name: str) -> dict[str, Any] | None: ...

    async def list_pods(self, job_name: str) -> list[dict[str, Any]]: ...

    async def annotate(self, job: Mapping[str, Any], annotations: dict[str, str]) -> Any: ...

    async def log_since(self, pod: str, container: str, since_seconds: int) -> str: ...


class WatchedPods(Protocol):
    """What a wait reads of a pod watch (``pod_watcher.NamespacePodWatcher``)."""

    def objects(self, job_name: str) -> list[dict[str, Any]] | None:
        """The job's pods (``[]``: none) while the watch is synced; ``None`` otherwise."""
        ...

    @property
    def listing(self) -> bool:
        """Whether the watch's LIST is under way without failing: its copies come soon."""
        ...


async def take_step(
    calls: JobCalls,
    job: Mapping[str, Any] | None,
    target: JobTarget,
    memory: StepMemory,
    log: logging.Logger | Any,
    *,
    fresh: bool,
    pod_watch: WatchedPods | None,
    wandb: WandbProgress | None = None,
) -> tuple[StepMemory, WaitResult | None]:
    """Look at ``job`` as read (``fresh``: just now from the apiserver, not a cached copy):
    log its progress, mark its gang whole, judge it (its pods from ``pod_watch`` when it holds
    them, see :func:`_pods`; ``wandb``: its online run). A verdict that deletes or fails,
    judged on a cached copy, is judged again on a fresh read.

    :returns: the waiter's memory after the step, and the wait's result (``None``: wait on).
    """
    view = look(job, target, memory, time.time())
    await _show(calls, view, log)
    if view.read_progress and wandb is not None:
        view = await _read_progress(calls, view, target, wandb, log)
    if view.ask_wandb_stop and wandb is not None:
        unheeded = await _stop_unheeded(calls, view.seen, target, log, wandb)
        if unheeded is not None:
            return view.memory, unheeded
    if view.read_pods:
        return view.memory, await _running_job(calls, pod_watch, view, target, log, wandb)
    result = view.result
    if result is None or fresh or not result.outcome.row.confirm:
        return view.memory, result
    confirmed = await fetch(calls, target, log)
    if confirmed is UNKNOWN:  # never destroy on a guess: wait, and read again
        return view.memory, None
    whole = view.memory.gang_seen_whole
    return view.memory, judge(confirmed, target, time.time(), gang_seen_whole=whole)


async def _show(calls: JobCalls, view: Look, log: logging.Logger | Any) -> None:
    """What the look asks to be shown: its progress line logged, the whole gang marked."""
    if view.progress is not None:
        log.info("%s", view.progress)
    if view.mark is not None and view.seen.job is not None:
        await _mark(calls, view.seen.job, view.mark, log, "the whole gang")


async def _mark(
    calls: JobCalls, job: Mapping[str, Any], marks: dict[str, str], log: Any, what: str
) -> None:
    """Annotate ``job``; a failure is logged: the next waiter or look writes it again."""
    try:
        await calls.annotate(job, marks)
    except Exception as exc:
        log.warning("Could not record %s on the job: %s", what, exc)


def take_step_sync(
    hook: VolcanoHook,
    job: Mapping[str, Any] | None,
    target: JobTarget,
    memory: StepMemory,
    log: logging.Logger | Any,
    wandb: WandbProgress | None = None,
) -> tuple[StepMemory, WaitResult | None]:
    """:func:`take_step` in a task's own process, over the sync ``VolcanoHook``, for a job just
    read (its pods too: no pod watch outlives a poke)."""
    calls = _SyncHookCalls(hook, target.namespace)
    return asyncio.run(
        take_step(calls, job, target, memory, log, fresh=True, pod_watch=None, wandb=wandb)
    )


def _job(target: JobTarget) -> str:
    return f"Volcano job {target.namespace}/{target.job_name}"


async def fetch(calls: JobCalls, target: JobTarget, log: logging.Logger | Any) -> Any:
    """The job from the apiserver (``None``: it does not exist, or not this submission);
    :data:`UNKNOWN` when the apiserver could not be asked."""
    try:
        job = await calls.fetch(target.job_name)
    except Exception as exc:
        log.warning("Could not read %s: %s", _job(target), exc)
        return UNKNOWN
    ours = job is not None and (not target.job_uid or job["metadata"].get("uid") == target.job_uid)
    return job if ours else None


async def _running_job(
    calls: JobCalls,
    pod_watch: WatchedPods | None,
    view: Look,
    target: JobTarget,
    log: logging.Logger | Any,
    wandb: WandbProgress | None,
) -> WaitResult | None:
    """The pods' verdicts (``judge.judge_pods``), then the stall timeout's, from the pods read
    now; ``None`` (wait on) when none ends the wait, or the pods cannot be read."""
    pods = await _pods(calls, pod_watch, target, log, view.seen.job)
    if pods is None:
        return None

    async def by_pods(seen: Seen, pods: list[dict[str, Any]]) -> WaitResult | None:
        return judge_pods(seen, target, pods, time.time())

    async def by_silence(seen: Seen, pods: list[dict[str, Any]]) -> WaitResult | None:
        return await _silent_master(calls, seen, target, log, pods, wandb)

    result = await _confirmed(calls, target, log, view.seen, pods, by_pods)
    if result is None and view.probe_stall:
        result = await _confirmed(calls, target, log, view.seen, pods, by_silence)
    return result


async def _confirmed(
    calls: JobCalls,
    target: JobTarget,
    log: logging.Logger | Any,
    seen: Seen,
    pods: list[dict[str, Any]],
    verdict: Callable[[Seen, list[dict[str, Any]]], Awaitable[WaitResult | None]],
) -> WaitResult | None:
    """``verdict`` of the job as ``seen`` with ``pods`` (read after it), when it says so again
    of a fresh GET of the job and a fresh LIST of its pods; ``None`` (wait on) otherwise, and
    when any of them cannot be read (what cannot be confirmed is no verdict)."""
    if await verdict(seen, pods) is None:
        return None
    fresh = await fetch(calls, target, log)
    if fresh is UNKNOWN:
        return None
    pods_again = await _pods(calls, None, target, log, job=None)  # from the apiserver
    if pods_again is None:
        return None
    return await verdict(see(fresh, target), pods_again)


async def _read_progress(
    calls: JobCalls, view: Look, target: JobTarget, wandb: WandbProgress, log: Any
) -> Look:
    """The look after reading the run's progress, and its line logged (on the job too) when due."""
    progress = await wandb.progress(log)
    if progress is None:
        return view
    # The read's due moment, not its end: after a slow read the next line came a read late.
    read_at = view.memory.progress_read_at or time.time()
    training, line = observe(view.memory.training, progress, read_at)
    if line is not None:
        log.info("%s", line)
    if line is not None and target.progress_annotation and view.seen.job is not None:
        await _mark(calls, view.seen.job, {PROGRESS_ANNOTATION: line}, log, "the progress")
    return dataclasses.replace(view, memory=dataclasses.replace(view.memory, training=training))


async def _stop_unheeded(
    calls: JobCalls, seen: Seen, target: JobTarget, log: logging.Logger | Any, wandb: WandbProgress
) -> WaitResult | None:
    """The wait's end when W&B says the job's run was stopped and a fresh GET shows the job
    still running ``wandb_stop_grace`` after a waiter first heard it; ``None`` (wait on) until
    then, and when W&B or the apiserver cannot say. The first to hear it marks the job."""
    if seen.job is None or not await wandb.stopped(log):
        return None
    grace = target.wandb_stop_grace or 0.0
    heard_at = stop_seen_at(seen.job)
    if heard_at is None:
        log.info(
            "W&B run %s was %s: the trainer has %gs (wandb_stop_grace) to end %s "
            "by itself before the job is deleted",
            wandb.run.run_id,
            STOPPED_BY,
            grace,
            _job(target),
        )
        await _mark(calls, seen.job, stop_seen_mark(time.time()), log, "the W&B run's stop")
        return None
    if time.time() - heard_at < grace:
        return None
    fresh = await fetch(calls, target, log)
    if fresh is UNKNOWN or fresh is None:  # gone: the job's own verdict says how it ended
        return None
    status = see(fresh, target).status
    if status.terminal:
        return None
    return WaitResult.stop_unheeded(status, wandb.run.run_id, grace)


async def _silent_master(
    calls: JobCalls,
    seen: Seen,
    target: JobTarget,
    log: logging.Logger | Any,
    pods: list[dict[str, Any]],
    wandb: WandbProgress | None,
) -> WaitResult | None:
    probe = stall_probe(seen, target, pods, time.time())
    if probe is None:
        return None
    try:
        printed = await calls.log_since(probe.pod, probe.container, probe.since_seconds)
    except Exception as exc:
        log.warning("Could not read the master's log of %s for a stall: %s", _job(target), exc)
        return None
    stall = stalled(probe, printed)
    if stall is not None and wandb is not None:
        stall = await _heard_from_wandb(wandb, stall, target, log)
    return judge_stall(seen, stall)


async def _heard_from_wandb(
    wandb: WandbProgress, stall: Stall, target: JobTarget, log: logging.Logger | Any
) -> Stall | None:
    """The silent master's ``stall``, once its W&B run was asked for its last step."""
    last_step = await wandb.last_step(log)
    verdict = stalled_online(stall, last_step, time.time())
    if verdict is None and last_step is not None:
        log.info(
            "The master of %s has printed nothing for %gs, but its W&B run %s "
            "logged step %s %.0fs ago: training goes on, not stalled",
            _job(target),
            stall.stall_timeout,
            wandb.run.run_id,
            last_step.step,
            max(0.0, time.time() - last_step.logged_at),
        )
    return verdict


async def _pods(
    calls: JobCalls,
    pod_watch: WatchedPods | None,
    target: JobTarget,
    log: logging.Logger | Any,
    job: Mapping[str, Any] | None,
) -> list[dict[str, Any]] | None:
    """The job's pods: ``pod_watch``'s copies when ``job`` (as just looked at) labels all its
    pods as the watch selects them and the watch is synced; else a LIST, as without a pod
    watch and for ``job`` ``None`` (a verdict's confirmation: always from the apiserver)."""
    watch = pod_watch if pods_managed(job) else None
    watched = watch.objects(target.job_name) if watch is not None else None
    if watched is not None:
        return watched
    if watch is not None and watch.listing:
        # The pod watch's LIST is under way (a triggerer's start, a relist), not failing: the
        # next check reads its copies. A LIST per job meanwhile would be a thousand at once,
        # racing that one LIST for the apiserver, and a hundred connections held after it.
        return None
    try:
        return await calls.list_pods(target.job_name)
    except Exception as exc:
        # The budget is a bound on a failing job, not the wait's source of truth: a read that
        # fails leaves the job to the next look, which reads again.
        log.warning("Could not read the pods of %s for their verdicts: %s", _job(target), exc)
        return None


class _SyncHookCalls:
    """``JobCalls`` over the sync hook (blocking is fine: the loop is the step's own)."""

    def __init__(self, hook: VolcanoHook, namespace: str) -> None:
        self.hook, self.namespace = hook, namespace

    async def fetch(self, name: str) -> dict[str, Any] | None:
        return self.hook.get_job(name, self.namespace)

    async def list_pods(self, job_name: str) -> list[dict[str, Any]]:
        return self.hook.list_job_pods(job_name, self.namespace)

    async def annotate(self, job: Mapping[str, Any], annotations: dict[str, str]) -> Any:
        meta = job["metadata"]
        return self.hook.set_job_annotations(
            meta["name"], meta["namespace"], meta["uid"], annotations
        )

    async def log_since(self, pod: str, container: str, since_seconds: int) -> str:
        return self.hook.read_pod_log_since(pod, self.namespace, container, since_seconds)

"""Judge a job at a moment: keep waiting, or end the wait with an outcome.

Pure. The trigger and the sensor judge the job as last read (through ``step.look``), so they
never disagree about what a job, a timeout or a half-placed gang means. A job's status is read
once per look (:func:`see`). Each kind of evidence has its verdict: the job's status and the
clock (:func:`judge_seen`), its pods (:func:`judge_pods`), its master's silence
(:func:`judge_stall`); ``outcome`` words each.

``pending_timeout`` counts until *every* rank is placed and running (DDP with a static world
size trains only then), and means "never fully placed since submission" (docs/operator.md):
whether the gang was ever whole is read from the job (:func:`gang_was_whole`), since no
waiter's memory survives a triggerer restart, a handover, a reattaching retry or a
reschedule-mode poke. A rank lost after that is reported as restarting, never as pending.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.job.job_status import JobStatus, interpret
from airflow_volcano_wandb.job.job_view import JobView, ObjectMeta, epoch_seconds
from airflow_volcano_wandb.job.ownership import DOMAIN
from airflow_volcano_wandb.wait.diagnostics import STARTED_POD_PHASES
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.restart_budget import crash_loop
from airflow_volcano_wandb.wait.stall import Stall
from airflow_volcano_wandb.wait.startup import start_failure
from airflow_volcano_wandb.wait.training_progress import READ_INTERVAL
from airflow_volcano_wandb.wait.wandb_stop import stopped_rank

#: When a waiter first saw every rank of the job placed and running (UTC, ISO 8601).
GANG_WHOLE_ANNOTATION = f"{DOMAIN}/gang-whole-at"


#: Two LISTs per running job per minute, not one per ``poll_interval`` tick: a crash loop takes
#: minutes to exhaust a budget (the kubelet's back-off doubles from 10 s), so seeing it up to
#: this much later costs little.
DEFAULT_POD_CHECK_INTERVAL = 30.0
#: How long a job may stay unreadable before the wait ends as a lost watch: ten minutes,
#: longer than a RoleBinding re-applied by Helm or Argo CD stays missing.
DEFAULT_WATCH_FAILURE_GRACE = 600.0


@dataclass(frozen=True, kw_only=True)
class JobLimits:
    """The limits a wait holds its job to, as the trigger's spec stores them (``None``: off)."""

    pending_timeout: float | None = None
    #: Wall-clock epoch seconds at which Airflow's ``execution_timeout`` is reached.
    deadline: float | None = None
    #: The restart budget over all ranks (``restart_budget``); ``None``: restarts are not
    #: counted.
    max_container_restarts: int | None = None
    #: Seconds the master of a running job may print nothing (``stall``); ``None``: no limit.
    stall_timeout: float | None = None
    #: Seconds a placed rank's container may keep failing to start for a reason that may heal
    #: (``startup``); ``None``: a container that cannot start is not looked for.
    startup_timeout: float | None = None
    #: When this try's wait began (epoch seconds): the startup budget counts from no earlier.
    waiting_since: float | None = None
    #: Seconds a running job may go on after its W&B run was heard stopped (``wandb_stop``)
    #: before the wait deletes it; ``None``: W&B is not asked.
    wandb_stop_grace: float | None = None


@dataclass(frozen=True)
class JobTarget(JobLimits):
    """The job a wait is about, and the limits it is held to."""

    job_name: str
    namespace: str
    #: The uid of the submission waited on; a job of that name with another uid is not it.
    job_uid: str | None = None
    #: How often a job's pods are read for the restart budget, a stop from W&B and a container
    #: that cannot start (``[volcano_wandb] pod_check_interval`` of the waiting process),
    #: whatever wakes the wait.
    pod_check_interval: float = DEFAULT_POD_CHECK_INTERVAL
    #: How often a running job's progress is read (``[volcano_wandb] progress_interval`` of the
    #: waiting process, ``training_progress``), and whether each line logged is also written
    #: on the job (``progress_annotation``: ``training_progress.PROGRESS_ANNOTATION``).
    progress_interval: float = READ_INTERVAL
    progress_annotation: bool = False


@dataclass(frozen=True)
class WandbRunRef:
    """The job's online W&B run a wait asks (its last step, progress, a stop): its id, where
    it is, and the ``wandb`` connection whose key may read it (the key itself is read where
    it is used, never carried)."""

    conn_id: str
    run_id: str
    entity: str | None
    project: str
    #: The summary metrics shown beside the training's progress (``wandb_summary_keys``).
    summary_keys: tuple[str, ...] = ()

    @classmethod
    def of_kwargs(cls, kwargs: Mapping[str, Any]) -> WandbRunRef | None:
        """The run a trigger's ``wandb_*`` keyword arguments name; ``None`` when they name
        none (no connection, run id or project)."""
        names = ("wandb_conn_id", "wandb_run_id", "wandb_project")
        conn_id, run_id, project = (kwargs.get(name) for name in names)
        if not (conn_id and run_id and project):
            return None
        entity, keys = kwargs.get("wandb_entity") or None, kwargs.get("wandb_summary_keys")
        return cls(str(conn_id), str(run_id), entity, str(project), tuple(keys or ()))


@dataclass(frozen=True)
class Seen:
    """A job as read, with its status interpreted once: what every question below asks."""

    #: The job (``None``: it does not exist, or it is another submission than the target's).
    job: Mapping[str, Any] | None
    status: JobStatus


def see(job: Mapping[str, Any] | None, target: JobTarget | None = None) -> Seen:
    """``job`` as the wait on ``target`` sees it: a job of the target's name but another uid
    counts as the target deleted."""
    if target is None:
        return Seen(job, interpret(job))
    if job is not None and target.job_uid and ObjectMeta.of(job).uid != target.job_uid:
        job = None
    return Seen(job, interpret(job, name=target.job_name, namespace=target.namespace))


def unplaced_ranks(status: JobStatus) -> dict[str, str]:
    """Tasks with ranks not yet started, as ``{"worker": "1/3"}`` (started/replicas). An
    elastic job's task misses ranks only below the pods it needs (its ``minAvailable``)."""
    unplaced = {}
    for task, replicas in status.replicas.items():
        counts = status.pods_by_task.get(task, {})
        started = sum(counts.get(phase, 0) for phase in STARTED_POD_PHASES)
        if started < status.needed.get(task, replicas):
            unplaced[task] = f"{started}/{replicas}"
    return unplaced


def gang_wait_seconds(seen: Seen, now: float, *, gang_seen_whole: bool = False) -> float | None:
    """How long the job has waited for its whole gang, or ``None`` when it is not waiting.

    ``Pending`` counts from the phase's transition (a restart of a gang never whole starts the
    clock again), ``Running`` with ranks missing from the job's creation, or its last
    transition after a restart. Once the gang was seen whole (``gang_seen_whole``, or
    :func:`gang_was_whole`), a rank lost later is Volcano's to restore: no placement wait.
    """
    job, status = seen.job, seen.status
    if job is None or status.terminal or gang_seen_whole or gang_was_whole(seen):
        return None
    created = ObjectMeta.of(job).creation_timestamp
    if status.phase in ("", "Pending"):
        since = status.transition_time or created
    elif status.phase == "Running" and unplaced_ranks(status):
        since = status.transition_time if status.retry_count else created
    else:
        return None
    if not since:
        return None
    return now - (epoch_seconds(since) or now)


def judge(
    job: Mapping[str, Any] | None,
    target: JobTarget,
    now: float,
    *,
    gang_seen_whole: bool = False,
    pods: Sequence[Mapping[str, Any]] | None = None,
) -> WaitResult | None:
    """The wait's result if it ends now, else ``None``. ``job`` is the latest copy known to be
    current (``None``: it does not exist); ``pods``, read after it when :func:`reads_pods` says
    so, are judged (:func:`judge_pods`) before the timeouts."""
    seen = see(job, target)
    by_pods = judge_pods(seen, target, pods, now) if pods is not None else None
    return by_pods or judge_seen(seen, target, now, gang_seen_whole=gang_seen_whole)


def judge_seen(
    seen: Seen, target: JobTarget, now: float, *, gang_seen_whole: bool = False
) -> WaitResult | None:
    """The verdict of the job's own status and the clock on a job already seen (:func:`see`):
    its end, a gang not placed within ``pending_timeout``, Airflow's ``execution_timeout``."""
    status = seen.status
    if status.terminal:  # a deleted job has no uid of its own: name the one waited on
        result = WaitResult.from_status(status)
        return dataclasses.replace(result, job_uid=result.job_uid or target.job_uid or "")
    if target.pending_timeout is not None:
        waited = gang_wait_seconds(seen, now, gang_seen_whole=gang_seen_whole)
        if waited is not None and waited >= target.pending_timeout:
            return WaitResult.not_placed(status, target.pending_timeout, unplaced_ranks(status))
    if target.deadline is not None and now >= target.deadline:
        uid = status.uid or target.job_uid or ""
        return WaitResult.timed_out(status, target.job_name, target.namespace, uid)
    return None


def judge_pods(
    seen: Seen, target: JobTarget, pods: Sequence[Mapping[str, Any]], now: float
) -> WaitResult | None:
    """The verdict of the job's ``pods`` (read after it), which its status cannot show: a rank
    stopped from W&B (a stop explains the restarts it causes), else a crash loop past the
    restart budget, else a container that cannot start; ``None`` for anything else."""
    if seen.status.terminal or seen.job is None:
        return None
    status = seen.status
    uid = target.job_uid or status.uid
    if counts_restarts(seen, target):
        stopped = stopped_rank(pods, job_name=status.name, job_uid=uid)
        if stopped is not None:
            return WaitResult.stopped_from_wandb(status, stopped)
        budget = target.max_container_restarts
        loop = crash_loop(pods, budget, job_name=status.name, job_uid=uid)
        if loop is not None:
            return WaitResult.crash_looping(status, loop)
    if checks_startup(seen, target):
        failure = start_failure(
            pods,
            target.startup_timeout,
            now,
            job_name=status.name,
            job_uid=uid,
            not_before=target.waiting_since,
        )
        if failure is not None:
            return WaitResult.could_not_start(status, failure)
    return None


def judge_stall(seen: Seen, stall: Stall | None) -> WaitResult | None:
    """``STALLED`` for a job still running whose master's log probe found ``stall``
    (``stall.stalled``); ``None`` for anything else."""
    if stall is None or seen.job is None or seen.status.phase != "Running":
        return None
    return WaitResult.stalled(seen.status, stall)


def counts_restarts(seen: Seen, target: JobTarget) -> bool:
    """Whether to read the job's pods for their restarts now: only a running job restarts
    containers in place, and only a target with a budget counts them."""
    running = seen.job is not None and seen.status.phase == "Running"
    return running and target.max_container_restarts is not None


def checks_startup(seen: Seen, target: JobTarget) -> bool:
    """Whether to read the job's pods for a container that cannot start now: only while a rank
    has not started (such a pod is ``Pending``), for a target with a ``startup_timeout``."""
    if seen.job is None or seen.status.terminal or target.startup_timeout is None:
        return False
    return seen.status.phase in ("", "Pending") or bool(unplaced_ranks(seen.status))


def may_read_pods(target: JobTarget) -> bool:
    """Whether a wait on ``target`` ever reads the job's pods (a limit that pods judge)."""
    limits = (target.max_container_restarts, target.startup_timeout, target.stall_timeout)
    return any(limit is not None for limit in limits)


def reads_pods(seen: Seen, target: JobTarget) -> bool:
    """Whether the job's pods have a verdict to give now (:func:`judge_pods`)."""
    return counts_restarts(seen, target) or checks_startup(seen, target)


def gang_marked_whole(job: Mapping[str, Any] | None) -> bool:
    """Whether a waiter has recorded on the job that its gang was once whole."""
    return GANG_WHOLE_ANNOTATION in ObjectMeta.of(job).annotations


def gang_was_whole(seen: Seen) -> bool:
    """Whether the job itself shows that its gang was whole at some time since submission:
    a waiter's mark, or a ``Running`` condition of a job whose ``minAvailable`` covers every
    rank (the provider's default gang: Volcano calls it Running only once all ranks are). With
    a smaller ``minAvailable`` (``gang="template"``) only the mark tells."""
    job = seen.job
    if job is None:
        return False
    if gang_marked_whole(job):
        return True
    view = JobView.of(job)
    world_size = sum(view.needed.values())  # an elastic job's gang: the ranks it needs
    if not world_size or int(view.min_available or 0) < world_size:
        return False
    return any(condition.get("status") == "Running" for condition in view.conditions)


def gang_whole_since(job: Mapping[str, Any]) -> str | None:
    """When the job's gang was first seen whole (RFC 3339), as :func:`gang_was_whole` knows
    it; ``None`` when the job does not show it."""
    view = JobView.of(job)
    if GANG_WHOLE_ANNOTATION in view.annotations:
        return str(view.annotations[GANG_WHOLE_ANNOTATION])
    if not gang_was_whole(see(job)):
        return None
    running = [c for c in view.conditions if c.get("status") == "Running"]
    return running[0].get("lastTransitionTime") if running else None

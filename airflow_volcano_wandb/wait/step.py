"""One look at a job while waiting on it: what to log, what to write, what the judge says of
its status, and what else to read.

Pure. The trigger (on every watch event and timer tick) and the sensor (on every poke) look
at the job through :func:`look`, and ``step_io`` carries out what it asks for, so the two
never disagree about a progress line, the gang-whole mark or a verdict. The job's status is
interpreted once per look (``judge.see``), whatever the look asks of it. A step reads: look,
then ``step_io`` reads what the look asked for and asks ``judge`` of it, then acts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.job.job_view import api_timestamp
from airflow_volcano_wandb.wait.judge import (
    GANG_WHOLE_ANNOTATION,
    Seen,
    WaitTarget,
    gang_marked_whole,
    gang_was_whole,
    judge_seen,
    reads_pods,
    see,
    unplaced_ranks,
)
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.stall import Stall, probe_due, silence_probe
from airflow_volcano_wandb.wait.training_progress import ProgressSeen
from airflow_volcano_wandb.wait.wandb_stop import ask_interval


@dataclass(frozen=True)
class WaitMemory:
    """What one waiter remembers between its looks at the job."""

    #: It saw every rank placed and running (the job's mark may not show on a cached copy yet,
    #: or could not be written).
    gang_seen_whole: bool = False
    #: The last progress line it logged.
    progress: str = ""
    #: When it last probed the master's log for a stall (epoch seconds); forgotten on a
    #: restart, which only means one probe sooner than due.
    stall_probed_at: float | None = None
    #: When it last read the job's pods for their verdicts (epoch seconds), the same way.
    pods_read_at: float | None = None
    #: When it last asked W&B whether the job's run was stopped (epoch seconds), the same way.
    wandb_stop_asked_at: float | None = None
    #: When it last read the training's progress (epoch seconds), and what it saw.
    progress_read_at: float | None = None
    training: ProgressSeen = field(default_factory=ProgressSeen)


@dataclass(frozen=True)
class Look:
    """What one look at the job decided."""

    seen: Seen
    #: The waiter's memory after this look.
    memory: WaitMemory
    #: The progress line to log, when it changed.
    progress: str | None
    #: The gang-whole annotation to write on the job (``judge.GANG_WHOLE_ANNOTATION``).
    mark: dict[str, str] | None
    #: The judge's result without the pods.
    result: WaitResult | None
    #: The wait goes on unless the pods, read now, show a crash loop (the restart budget), a
    #: rank stopped from W&B or a container that cannot start (``judge.judge_pods``), or show
    #: a master to probe for a stall.
    read_pods: bool
    #: Probe the master's log for a stall (``stall``), from the pods read now.
    probe_stall: bool = False
    #: Ask W&B whether the job's run was stopped (``wandb_stop``).
    ask_wandb_stop: bool = False
    #: Read how far the training has got (``training_progress``).
    read_progress: bool = False


def look(job: Mapping[str, Any] | None, target: WaitTarget, memory: WaitMemory, now: float) -> Look:
    """The look at ``job`` (as read: ``None`` when it does not exist) of a waiter whose memory
    is ``memory``.

    The mark is asked for once per waiter, the first time it sees the gang whole on a job not
    marked yet: a later waiter (after a restart, a handover, a retry, a rescheduled poke) reads
    the job again and writes it if it is still missing.
    """
    seen = see(job, target)
    gang_seen_whole, line, mark = memory.gang_seen_whole, memory.progress, None
    if seen.job is not None:
        if not gang_seen_whole and gang_is_whole(seen):
            gang_seen_whole = True
            mark = gang_whole_mark(now) if needs_gang_whole_mark(seen) else None
        line = progress_line(seen, gang_seen_whole=gang_seen_whole)
    result = judge_seen(seen, target, now, gang_seen_whole=gang_seen_whole)
    probe = result is None and probes_stall(seen, target, memory.stall_probed_at, now)
    read_pods = result is None and (
        probe or (reads_pods(seen, target) and _pods_due(target, memory.pods_read_at, now))
    )
    ask = result is None and asks_wandb_stop(seen, target, memory.wandb_stop_asked_at, now)
    progress = result is None and reads_progress(seen, target, memory.progress_read_at, now)
    return Look(
        seen=seen,
        memory=WaitMemory(
            gang_seen_whole=gang_seen_whole,
            progress=line,
            stall_probed_at=now if probe else memory.stall_probed_at,
            pods_read_at=now if read_pods else memory.pods_read_at,
            wandb_stop_asked_at=now if ask else memory.wandb_stop_asked_at,
            progress_read_at=now if progress else memory.progress_read_at,
            training=memory.training,
        ),
        progress=line if line != memory.progress else None,
        mark=mark,
        result=result,
        read_pods=read_pods,
        probe_stall=probe,
        ask_wandb_stop=ask,
        read_progress=progress,
    )


def _pods_due(target: WaitTarget, read_at: float | None, now: float) -> bool:
    """The reads of a job's pods for their verdicts, at most every ``pod_check_interval``: a
    wake of the waiter (each change of the job, each ``poll_interval``) need not LIST them
    again."""
    return read_at is None or now - read_at >= target.pod_check_interval


def stall_probe(
    seen: Seen, target: WaitTarget, pods: Sequence[Mapping[str, Any]], now: float
) -> Stall | None:
    """The master container whose log to probe for a stall, from the job and its ``pods``
    (read after it); ``None`` while there is none running for ``stall_timeout``."""
    if seen.job is None or target.stall_timeout is None:
        return None
    uid = target.uid or seen.status.uid
    return silence_probe(seen.job, pods, target.stall_timeout, now, uid)


def probes_stall(seen: Seen, target: WaitTarget, probed_at: float | None, now: float) -> bool:
    """Whether the waiter should probe the master's log for a stall now: only a running job
    can stall, only a target with a ``stall_timeout`` is held to one, and a waiter probes at
    most once per ``stall_timeout / PROBES_PER_TIMEOUT`` (it last did at ``probed_at``)."""
    if seen.job is None or seen.status.phase != "Running":
        return False
    return probe_due(target.stall_timeout, probed_at, now)


def asks_wandb_stop(seen: Seen, target: WaitTarget, asked_at: float | None, now: float) -> bool:
    """Whether the waiter should ask W&B whether the job's run was stopped now: only of a job
    still there and not ended, only for a target with a ``wandb_stop_grace``, and at most every
    ``wandb_stop.ask_interval`` (it last asked at ``asked_at``)."""
    grace = target.wandb_stop_grace
    if grace is None or seen.job is None or seen.status.terminal:
        return False
    return asked_at is None or now - asked_at >= ask_interval(grace)


def reads_progress(seen: Seen, target: WaitTarget, read_at: float | None, now: float) -> bool:
    """Whether the waiter should read how far the training has got: only of a running job,
    at most every ``progress_interval`` (it last did at ``read_at``)."""
    if seen.job is None or seen.status.phase != "Running":
        return False
    return read_at is None or now - read_at >= target.progress_interval


def gang_is_whole(seen: Seen) -> bool:
    """Whether every rank of the job is placed and running right now."""
    return seen.status.phase == "Running" and not unplaced_ranks(seen.status)


def needs_gang_whole_mark(seen: Seen) -> bool:
    """Whether the waiter looking at the job should write :data:`GANG_WHOLE_ANNOTATION` now."""
    return gang_is_whole(seen) and not gang_marked_whole(seen.job)


def gang_whole_mark(now: float) -> dict[str, str]:
    """The annotation that records the gang whole at ``now`` (epoch seconds)."""
    return {GANG_WHOLE_ANNOTATION: api_timestamp(now)}


def progress_line(seen: Seen, *, gang_seen_whole: bool = False) -> str:
    """The task log's line for the job now; a gang that was whole and lost a rank says that
    Volcano is restarting it, with Volcano's own reason when it gives one."""
    status = seen.status
    line = status.progress()
    was_whole = gang_seen_whole or gang_was_whole(seen)
    # Completing, Aborting and Terminating take ranks down on purpose: nothing is restarting.
    restarting = status.phase in ("Running", "Pending", "Restarting")
    lost_ranks = unplaced_ranks(status) or status.phase in ("Pending", "Restarting")
    if was_whole and restarting and lost_ranks:
        lost = ", ".join(f"{task} {count}" for task, count in unplaced_ranks(status).items())
        line += " - restarting: the gang was whole"
        line += f" and lost ranks ({lost})" if lost else ""
        cause = ": ".join(part for part in (status.reason, status.message) if part)
        line += f"; Volcano: {cause}" if cause else "; Volcano is replacing them"
    return line

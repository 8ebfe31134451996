"""One look at a job while waiting on it: what to log, what to write, what the judge says of
its status, and what else to read.

Pure. The trigger (on every watch event and timer tick) and the sensor (on every poke) look
at the job through :func:`look`, and ``step_io`` reads what it asks for, asks ``judge`` of it
and acts, so the two never disagree about a progress line, the gang-whole mark or a verdict.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.job.job_view import api_timestamp
from airflow_volcano_wandb.wait.judge import (
    GANG_WHOLE_ANNOTATION,
    JobTarget,
    Seen,
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
class StepMemory:
    """What one waiter remembers between its looks at the job."""

    #: It saw every rank placed and running (the job's mark may not show on a cached copy yet,
    #: or could not be written).
    gang_seen_whole: bool = False
    #: The last progress line it logged.
    progress: str = ""
    #: When it last probed the master's log for a stall, read the job's pods, asked W&B whether
    #: the run was stopped and read the training's progress (epoch seconds), and what it saw;
    #: forgotten on a restart, which only means one read sooner than due.
    stall_probed_at: float | None = None
    pods_read_at: float | None = None
    wandb_stop_asked_at: float | None = None
    progress_read_at: float | None = None
    training: ProgressSeen = field(default_factory=ProgressSeen)
    #: The running pods of each elastic task it last saw (``(task, count)``), to say when a
    #: worker is lost or joins.
    elastic_running: tuple[tuple[str, int], ...] = ()
    #: Since when (epoch seconds) an elastic job that had its gang has run short of a task's
    #: ``minAvailable``; past ``pending_timeout`` that is the placement wait's failure.
    short_since: float | None = None


@dataclass(frozen=True)
class Look:
    """What one look at the job decided."""

    seen: Seen
    #: The waiter's memory after this look.
    memory: StepMemory
    #: The progress line to log, when it changed.
    progress: str | None
    #: The gang-whole annotation to write on the job (``judge.GANG_WHOLE_ANNOTATION``).
    mark: dict[str, str] | None
    #: The judge's result without the pods.
    result: WaitResult | None
    #: What to read now: the pods (for ``judge.judge_pods``, or a master to probe), the
    #: master's log for a stall, W&B for a stop, and the training's progress.
    read_pods: bool
    probe_stall: bool = False
    ask_wandb_stop: bool = False
    read_progress: bool = False


def look(job: Mapping[str, Any] | None, target: JobTarget, memory: StepMemory, now: float) -> Look:
    """The look at ``job`` (``None``: it does not exist) of a waiter whose memory is
    ``memory``. The mark is asked for once per waiter, the first time it sees the gang whole on
    a job not marked yet: a later waiter reads the job again and writes it if still missing."""
    seen = see(job, target)
    gang_seen_whole, line, mark = memory.gang_seen_whole, memory.progress, None
    running, note, short = memory.elastic_running, "", None
    if seen.job is not None:
        if not gang_seen_whole and gang_is_whole(seen):
            gang_seen_whole = True
            mark = gang_whole_mark(now) if needs_gang_whole_mark(seen) else None
        line = progress_line(seen, gang_seen_whole=gang_seen_whole)
        running = elastic_running(seen)
        step = memory.training.read.step if memory.training.read is not None else None
        note = membership_note(seen, dict(memory.elastic_running), dict(running), step)
        short = short_since(seen, gang_seen_whole, memory.short_since, now)
    result = judge_seen(seen, target, now, gang_seen_whole=gang_seen_whole)
    result = result or judge_short(seen, target, short, now)
    probe = result is None and probes_stall(seen, target, memory.stall_probed_at, now)
    read_pods = result is None and (
        probe or (reads_pods(seen, target) and _pods_due(target, memory.pods_read_at, now))
    )
    ask = result is None and asks_wandb_stop(seen, target, memory.wandb_stop_asked_at, now)
    progress = result is None and reads_progress(seen, target, memory.progress_read_at, now)
    return Look(
        seen=seen,
        memory=StepMemory(
            gang_seen_whole=gang_seen_whole,
            progress=line,
            stall_probed_at=now if probe else memory.stall_probed_at,
            pods_read_at=now if read_pods else memory.pods_read_at,
            wandb_stop_asked_at=now if ask else memory.wandb_stop_asked_at,
            progress_read_at=now if progress else memory.progress_read_at,
            training=memory.training,
            elastic_running=running,
            short_since=short,
        ),
        progress=line + note if note else line if line != memory.progress else None,
        mark=mark,
        result=result,
        read_pods=read_pods,
        probe_stall=probe,
        ask_wandb_stop=ask,
        read_progress=progress,
    )


def elastic_running(seen: Seen) -> tuple[tuple[str, int], ...]:
    """The running pods of each task that may run with fewer than its replicas (``elastic=``:
    it needs only its ``minAvailable``)."""
    status = seen.status
    return tuple(
        (task, status.pods_by_task.get(task, {}).get("Running", 0))
        for task, replicas in status.replicas.items()
        if status.needed.get(task, replicas) < replicas
    )


def membership_note(
    seen: Seen, before: Mapping[str, int], now: Mapping[str, int], step: int | None = None
) -> str:
    """`` - worker lost: 2 of 3 running (at least 1), resuming from its newest checkpoint
    (last step seen 1,800)`` when an elastic task's running pods fell since the last look,
    ``joined`` when they rose (the trainer re-forms its world either way); ``""`` on the first
    look or none. ``step``: the training's last step the waiter read, if any."""
    notes = []
    for task, count in now.items():
        if task not in before or before[task] == count:
            continue
        word = "lost" if count < before[task] else "joined"
        needed, replicas = seen.status.needed[task], seen.status.replicas[task]
        note = f"{task} {word}: {count} of {replicas} running (at least {needed})"
        if word == "lost" and count >= needed:
            note += ", resuming from its newest checkpoint"
            note += f" (last step seen {step:,})" if step is not None else ""
        notes.append(note)
    return "".join(f" - {n}" for n in notes)


def short_since(seen: Seen, gang_seen_whole: bool, since: float | None, now: float) -> float | None:
    """Since when an elastic job whose gang was whole has had a task below its
    ``minAvailable`` (``since``: as the waiter last knew it, else ``now``); ``None`` while it
    has not, for a job that is not elastic, or one that ended."""
    status = seen.status
    elastic = any(status.needed.get(t, n) < n for t, n in status.replicas.items())
    was_whole = gang_seen_whole or gang_was_whole(seen)
    if not elastic or not was_whole or status.terminal or not unplaced_ranks(status):
        return None
    return now if since is None else since


def judge_short(
    seen: Seen, target: JobTarget, since: float | None, now: float
) -> WaitResult | None:
    """An elastic job short of its ``min_workers`` for ``pending_timeout`` (since
    :func:`short_since`) fails as a gang never placed does (``PENDING_TIMEOUT``): its
    survivors wait in torchrun's rendezvous with no GPU doing work."""
    timeout = target.pending_timeout
    if since is None or timeout is None or now - since < timeout:
        return None
    status = seen.status
    result = WaitResult.not_placed(status, timeout, unplaced_ranks(status))
    missing = ", ".join(f"{task} {count}" for task, count in unplaced_ranks(status).items())
    message = (
        f"Volcano job {status.namespace}/{status.name} ran with fewer than its elastic "
        f"minimum of workers for pending_timeout={timeout:g}s (ranks started: {missing})"
    )
    return dataclasses.replace(result, message=message)


def _pods_due(target: JobTarget, read_at: float | None, now: float) -> bool:
    """At most every ``pod_check_interval``, whatever wakes the waiter."""
    return read_at is None or now - read_at >= target.pod_check_interval


def stall_probe(
    seen: Seen, target: JobTarget, pods: Sequence[Mapping[str, Any]], now: float
) -> Stall | None:
    """The master container whose log to probe for a stall, from the job and its ``pods``
    (read after it); ``None`` while there is none running for ``stall_timeout``."""
    if seen.job is None or target.stall_timeout is None:
        return None
    uid = target.job_uid or seen.status.uid
    return silence_probe(seen.job, pods, target.stall_timeout, now, uid)


def probes_stall(seen: Seen, target: JobTarget, probed_at: float | None, now: float) -> bool:
    """Whether to probe the master's log for a stall now: only of a running job, when
    ``stall.probe_due`` (it last did at ``probed_at``)."""
    if seen.job is None or seen.status.phase != "Running":
        return False
    return probe_due(target.stall_timeout, probed_at, now)


def asks_wandb_stop(seen: Seen, target: JobTarget, asked_at: float | None, now: float) -> bool:
    """Whether to ask W&B whether the job's run was stopped now: only of a job not ended, for
    a ``wandb_stop_grace``, at most every ``wandb_stop.ask_interval`` since ``asked_at``."""
    grace = target.wandb_stop_grace
    if grace is None or seen.job is None or seen.status.terminal:
        return False
    return asked_at is None or now - asked_at >= ask_interval(grace)


def reads_progress(seen: Seen, target: JobTarget, read_at: float | None, now: float) -> bool:
    """Whether to read how far the training has got: only of a running job, at most every
    ``progress_interval`` since ``read_at``."""
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

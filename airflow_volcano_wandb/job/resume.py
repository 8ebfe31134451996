"""Whether a try resumes the W&B run of the try before it (pure).

A fresh job is a new intent and, by default, a new W&B run. When the try before it was
interrupted rather than wrong (its ranks preempted or evicted, its node lost, the task
killed), the new intent keeps the earlier run id: its checkpoint directory
(``/checkpoints/<run id>``) holds the earlier try's checkpoints, ``AVW_RESUME_FROM=latest``
continues from the newest, and the W&B history continues (``WANDB_RESUME=must``).

A :class:`RunRecord` in the task state store is written when the job exists and completed
with the cause when the try reports. A try killed while deferred reports nothing (the
triggerer has no store): the next try finds the record without a cause, and when a fresh
read shows that very job gone, the task was killed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from airflow_volcano_wandb.exceptions import (
    DELETED,
    KILLED,
    PREEMPTED,
    SUCCEEDED,
    TIMEOUT,
    TRAINER_FAILURE,
    UNKNOWN,
    VolcanoJobError,
)
from airflow_volcano_wandb.template.gpus import total_gpus
from airflow_volcano_wandb.template.naming import MAX_JOB_NAME_LENGTH

#: The causes ``resume_on`` may name.
RESUMABLE = (PREEMPTED, KILLED, DELETED, TIMEOUT, TRAINER_FAILURE)
#: ``resume_on``'s default: the endings that interrupt training without a fault of its own.
DEFAULT_RESUME_ON = (PREEMPTED, KILLED)
#: The task state store's key for the run the last submitted job writes to.
STATE_STORE_KEY = "volcano_run"


def cause_of(error: BaseException | None) -> str:
    """The cause a try ended by, from the exception it fails with (``None``: it succeeded): the
    ``resume_cause`` its class names (``exceptions``), ``unknown`` for any other exception."""
    if error is None:
        return SUCCEEDED
    return error.resume_cause if isinstance(error, VolcanoJobError) else UNKNOWN


def resume_on(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``resume_on`` checked: a comma-separated string (what a template renders) or a list;
    ``None`` or ``""`` resumes nothing. :class:`ValueError` names an unknown cause."""
    if value is None:
        return ()
    if not isinstance(value, Iterable):
        raise TypeError(f"resume_on must be a string or a list of causes, not {value!r}")
    names = value.split(",") if isinstance(value, str) else list(value)
    causes = tuple(str(name).strip() for name in names if str(name).strip())
    unknown = [cause for cause in causes if cause not in RESUMABLE]
    if unknown:
        raise ValueError(
            f"resume_on names {', '.join(map(repr, unknown))}; the causes a try may be resumed "
            f"after are {', '.join(RESUMABLE)}"
        )
    return causes


@dataclass(frozen=True)
class RunRecord:
    """The W&B run a try's job writes to, and how the try ended (``cause``: not yet told)."""

    run_id: str
    intent: int
    uid: str
    cause: str | None = None

    def to_store(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_store(cls, value: Any) -> RunRecord | None:
        """The record as stored; None for anything else (an older version's, a damaged one)."""
        if not isinstance(value, Mapping):
            return None
        run_id, intent, uid = value.get("run_id"), value.get("intent"), value.get("uid")
        cause = value.get("cause")
        if not (isinstance(run_id, str) and run_id and isinstance(uid, str) and uid):
            return None
        if type(intent) is not int or not (cause is None or isinstance(cause, str)):
            return None
        return cls(run_id, intent, uid, cause)


@dataclass(frozen=True)
class Resumption:
    """The earlier run a fresh job of this try continues."""

    run_id: str
    #: The intent of the try whose job was interrupted.
    from_intent: int
    cause: str
    #: ``WANDB_RESUME``: ``must`` when the earlier try's ranks were seen running (a preemption
    #: or eviction takes running pods, a trainer failure is the trainer's own exit): its run
    #: exists in W&B and is continued, never started anew; ``allow`` when the job may have
    #: been killed or deleted before its trainer started the run (then it is started).
    wandb_resume: str


def interrupted_by(record: RunRecord, remembered_uid: str | None, job_gone: bool) -> str | None:
    """The cause the earlier try ended by: its record's, else ``killed`` when the job the task
    state store remembers is that record's and a fresh read shows it gone (a kill in the
    triggerer reports nothing); None when it is not known (the job is still there: the plan
    reattaches to it or clears it as today)."""
    if record.cause is not None:
        return record.cause
    if remembered_uid == record.uid and job_gone:
        return KILLED
    return None


def resume_of(
    record: RunRecord | None, cause: str | None, policy: Iterable[str]
) -> Resumption | None:
    """The run a fresh job continues, or None for a run of its own.

    :param record: the task state store's record of the earlier try's job.
    :param cause: what ended that try (:func:`interrupted_by`).
    :param policy: the causes the DAG resumes after (``resume_on``).
    """
    if record is None or cause is None or cause not in set(policy):
        return None
    must = cause in (PREEMPTED, TRAINER_FAILURE)
    return Resumption(record.run_id, record.intent, cause, "must" if must else "allow")


def settled_by_wandb(resumed: Resumption, run_in_wandb: bool | None) -> Resumption:
    """The resumption with ``WANDB_RESUME`` as W&B's answer about the run settles it:
    ``must`` for a run W&B has, ``allow`` for one it does not (a rank preempted before its
    ``wandb.init``: ``must`` would fail the resumed trainer); unchanged when W&B was not asked
    or could not answer (``None``: offline, no API key, unreachable)."""
    if run_in_wandb is None:
        return resumed
    return replace(resumed, wandb_resume="must" if run_in_wandb else "allow")


#: The line a trainer prints when it resumes (docs/trainer.md, "Checkpoints"): the step it
#: continues after, the checkpoint it loaded and, optionally (a trainer of the older contract
#: does not say it), the seconds of training that checkpoint holds, over every earlier try.
RESUMED_LINE = re.compile(
    r"resumed from step ([0-9]+) \(checkpoint ([^)\s]+)\)"
    r"(?: after ([0-9]+(?:\.[0-9]+)?) s of training)?"
)


@dataclass(frozen=True)
class TrainerResumed:
    """What a resumed trainer said it continued from."""

    step: int
    checkpoint: str
    #: The wall-clock seconds of training the checkpoint stands for; None: not said.
    trained_seconds: float | None = None


def resumed_step(log_head: str) -> TrainerResumed | None:
    """The step and checkpoint a resumed trainer says it continued from, in the first lines of
    its log; None when it says nothing (it found no checkpoint, or does not follow the
    contract's wording)."""
    found = RESUMED_LINE.search(log_head)
    if not found:
        return None
    seconds = float(found[3]) if found[3] is not None else None
    return TrainerResumed(int(found[1]), found[2], seconds)


def job_gpus(job: Mapping[str, Any]) -> int:
    """The GPUs a job's gang holds: per task, its replicas times its pod template's GPUs."""
    return total_gpus((job.get("spec") or {}).get("tasks") or [])


def saved_gpu_seconds(trained_seconds: float, gpus: int) -> float:
    """The GPU-seconds a resume saved: the training its checkpoint stands for, not done again
    on the job's GPUs (to a tenth of a second, as ``gpu_usage`` counts)."""
    return round(max(0.0, trained_seconds) * gpus, 1)


def resumed_job_name(name: str, intent: int) -> str:
    """The name of a resumed intent's job: the interrupted job's name (a template such as the
    seed's ``wandb-job-${run_id}`` gives both the same) with ``-r<intent>``.

    Never the same name: Volcano 1.14's job controller can lose a job created under the name
    of one it is still cleaning up (seen on real pods: the job stayed ``Pending`` after both
    its pods had succeeded, its controller logging "Failed to get job ... from cache").
    """
    suffix = f"-r{int(intent)}"
    return name[: MAX_JOB_NAME_LENGTH - len(suffix)].rstrip("-") + suffix

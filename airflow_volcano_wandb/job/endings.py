"""How a wait on a Volcano job ends, in one table: each ending's word, the exception it raises
and what the wait does about it.

Pure. One :class:`Ending` row per ending: the job's phase reads into it (:func:`of_phase`),
the judge's verdicts and the pods' causes (``wait.diagnostics.classify``) name one, and
``wait.failure_exception`` raises the row's class, whose ``resume_cause`` the next try is
told (``job.resume``). The words are what trigger events and the W&B back-link carry; every
release wrote the same, so old events read back. The class is named, not imported:
``exceptions`` imports Airflow, and this module may not.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Row:
    """One ending's columns."""

    #: Its word in trigger events, the back-link and the task log.
    word: str
    #: The ``exceptions`` class a wait that ends so raises (``""``: it succeeded).
    error: str = ""
    #: Volcano's job phases that end the wait so (the others, and unknown ones, mean wait).
    phases: tuple[str, ...] = ()
    #: The reasons a container, a pod or an event gives (the kubelet's, a scheduler's, the
    #: taint manager's) that show this cause.
    reasons: tuple[str, ...] = ()
    #: Read from the job itself; ``False``: its state is unknown, it is never deleted for it.
    known: bool = True
    #: Judged on a cached copy, it is judged again on a fresh read first: it deletes or fails
    #: the task, and a watch outage may have hidden the job's real end. (The pods' and the
    #: silence's verdicts are always confirmed, by ``step_io``.)
    confirm: bool = False
    #: The job goes whatever ``on_finish_action`` says: it holds GPUs without training, or a
    #: person asked it to end (``wait.cleanup``).
    deletes: bool = False
    #: The job's pods, PodGroups and events are read for its report and its cause.
    reads_pods: bool = False
    #: The cause its pods (or its own evidence) show decides the class instead.
    refined: bool = False


class Ending(str, Enum):
    """How a wait ended: the job's own end, an end its status cannot tell, or (the last five)
    the cause a failed job's pods show."""

    def __new__(cls, row: Row) -> Ending:
        member = str.__new__(cls, row.word)
        member._value_ = row.word
        member.row = row
        return member

    row: Row

    SUCCEEDED = Row("succeeded", phases=("Completed",))
    #: Volcano ended the job badly; no pod says why any more, unless one refines it.
    FAILED = Row(
        "failed",
        "JobFailedError",
        ("Failed", "Terminated", "Aborted"),
        confirm=True,
        reads_pods=True,
        refined=True,
    )
    #: The job was deleted (or replaced) by someone else while it was waited on.
    DELETED = Row("deleted", "JobDeletedError", confirm=True)
    #: Not every rank was placed and running within ``pending_timeout`` (the gang's pods may
    #: show an image that cannot be pulled instead).
    PENDING_TIMEOUT = Row(
        "pending_timeout",
        "JobUnschedulableError",
        confirm=True,
        deletes=True,
        reads_pods=True,
        refined=True,
    )
    #: Airflow's ``execution_timeout`` was reached.
    TIMEOUT = Row("timeout", "JobTimeoutError", confirm=True, deletes=True)
    #: The containers restarted in place past ``max_container_restarts`` (``restart_budget``).
    CRASH_LOOP = Row("crash_loop", "TrainerCrashLoopError", deletes=True)
    #: A rank's trainer exited with W&B's stop code, or W&B said the run was stopped and the
    #: job still ran ``wandb_stop_grace`` later (``wandb_stop``); whatever else the pods show.
    STOPPED_FROM_WANDB = Row(
        "stopped_from_wandb", "StoppedFromWandbError", deletes=True, reads_pods=True
    )
    #: The master printed nothing for ``stall_timeout`` (``stall``).
    STALLED = Row("stalled", "TrainingStalledError", deletes=True)
    #: A placed rank's container cannot start (``startup``); which of the two causes below it
    #: is refines it.
    START_FAILED = Row("start_failed", "ContainerStartError", deletes=True, refined=True)
    #: The API could not be listed or watched for longer than the grace.
    WATCH_LOST = Row("watch_lost", "ApiserverUnreachableError", known=False)
    #: A rank was preempted by a scheduler or evicted from its node.
    PREEMPTED = Row(
        "preempted",
        "JobPreemptedError",
        reasons=("Evicted", "Evict", "Preempted", "Preempting", "TaintManagerEviction"),
    )
    #: A rank's image cannot be pulled, or is no image reference.
    IMAGE_PULL = Row(
        "image_pull",
        "ImagePullError",
        reasons=("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull"),
    )
    #: A rank's container cannot be created as configured (a missing Secret or ConfigMap key).
    CONTAINER_CONFIG = Row(
        "container_config",
        "ContainerConfigError",
        reasons=("CreateContainerConfigError", "CreateContainerError"),
    )
    #: A rank's container was killed for running out of memory.
    OOM_KILLED = Row("oom_killed", "OOMKilledError", reasons=("OOMKilled",))
    #: A rank's container exited non-zero (or is stuck for a reason of its own).
    EXIT_CODE = Row("exit_code", "TrainerExitError")

    @property
    def succeeded(self) -> bool:
        return not self.row.error

    def refined_by(self, cause: Ending | None) -> Ending:
        """The ending that decides the class: ``cause`` (what the pods show) where this ending
        is refined by one, else this one."""
        return cause if cause is not None and self.row.refined else self


_BY_PHASE = {phase: ending for ending in Ending for phase in ending.row.phases}
_BY_REASON = {reason: ending for ending in Ending for reason in ending.row.reasons}


def of_phase(phase: str) -> Ending | None:
    """The ending a Volcano job phase means, ``None`` for wait: ``Completing``, ``Aborting``,
    ``Terminating`` and ``Restarting`` are transient (Volcano moves on from them by itself),
    and a phase this version does not know yet is not an end either: waiting is the safe
    reading, and the pending timeout or Airflow's execution_timeout still bounds the wait."""
    return _BY_PHASE.get(phase)


def of_reason(reason: str) -> Ending | None:
    """The cause a container's, a pod's or an event's reason shows, ``None`` for no known one."""
    return _BY_REASON.get(reason)

"""How a failed wait ends, in one table: its outcome and the cause its pods show, to the
exception it raises and so the cause the next try is told (``resume_cause``).

A wait ends with an :class:`~airflow_volcano_wandb.wait.outcome.Outcome` (``judge`` decides
it, ``outcome`` words it); for the outcomes in :data:`CLASSIFIED` the job's pods and events
are read for what caused it (``diagnostics.classify``: a ``FailureKind``, ``None`` when they
could not be read). :data:`ENDINGS` maps each such pair to one class of ``exceptions``; the
class names the resume cause. A new failure cause is one row here, its class there.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.exceptions import (
    ApiserverUnreachableError,
    ContainerConfigError,
    ContainerError,
    ContainerStartError,
    ImagePullError,
    JobDeletedError,
    JobFailedError,
    JobPreemptedError,
    JobTimeoutError,
    JobUnschedulableError,
    OOMKilledError,
    StoppedFromWandbError,
    TrainerCrashLoopError,
    TrainerExitError,
    TrainingStalledError,
    VolcanoJobError,
)
from airflow_volcano_wandb.wait.diagnostics import Classification, FailureKind
from airflow_volcano_wandb.wait.outcome import Outcome, WaitResult

#: The cause the job's pods show (``None``: they were not read, or could not be).
Kind = FailureKind | None
_EVERY_KIND: tuple[Kind, ...] = (None, *FailureKind)
_Rows = dict[tuple[Outcome, Kind], type[VolcanoJobError]]

#: What the job's pods show, for the outcomes they refine: the most specific class wins.
_BY_KIND: dict[FailureKind, type[VolcanoJobError]] = {
    FailureKind.UNSCHEDULABLE: JobUnschedulableError,
    FailureKind.PREEMPTED: JobPreemptedError,
    FailureKind.IMAGE_PULL: ImagePullError,
    FailureKind.CONTAINER_CONFIG: ContainerConfigError,
    FailureKind.OOM_KILLED: OOMKilledError,
    FailureKind.STOPPED_FROM_WANDB: StoppedFromWandbError,
    FailureKind.EXIT_CODE: TrainerExitError,
    FailureKind.JOB_FAILED: JobFailedError,
}


def _refined(outcome: Outcome, unread: type[VolcanoJobError]) -> _Rows:
    """An outcome whose class the pods' cause decides; ``unread`` when they were not read."""
    return {(outcome, None): unread} | {(outcome, kind): cls for kind, cls in _BY_KIND.items()}


def _alone(outcome: Outcome, cls: type[VolcanoJobError]) -> _Rows:
    """An outcome that decides its class whatever the pods show."""
    return {(outcome, kind): cls for kind in _EVERY_KIND}


#: Every failed wait's ending: (outcome, the pods' cause) to the exception it raises.
ENDINGS: _Rows = {
    **_refined(Outcome.FAILED, JobFailedError),
    **_refined(Outcome.PENDING_TIMEOUT, JobUnschedulableError),
    # The pods only say which rank was stopped: whatever else they show, a person stopped it.
    **_alone(Outcome.STOPPED_FROM_WANDB, StoppedFromWandbError),
    **_alone(Outcome.DELETED, JobDeletedError),
    **_alone(Outcome.WATCH_LOST, ApiserverUnreachableError),
    **_alone(Outcome.TIMEOUT, JobTimeoutError),
    **_alone(Outcome.CRASH_LOOP, TrainerCrashLoopError),
    **_alone(Outcome.STALLED, TrainingStalledError),
    # The container that cannot start says which of the two it is (``_own_kind``).
    **_alone(Outcome.START_FAILED, ContainerStartError),
    (Outcome.START_FAILED, FailureKind.IMAGE_PULL): ImagePullError,
    (Outcome.START_FAILED, FailureKind.CONTAINER_CONFIG): ContainerConfigError,
}

#: The outcomes whose job's pods, PodGroups and events are read for their cause and report.
CLASSIFIED = (Outcome.PENDING_TIMEOUT, Outcome.FAILED, Outcome.STOPPED_FROM_WANDB)


def exception_class(outcome: Outcome, kind: Kind = None) -> type[VolcanoJobError]:
    """The class a wait that ended with ``outcome`` raises, its pods showing ``kind``."""
    return ENDINGS[(outcome, kind)]


def resume_cause(outcome: Outcome, kind: Kind = None) -> str:
    """The cause a try that ended so is told by (``job.resume``, ``resume_on``)."""
    return exception_class(outcome, kind).resume_cause


def for_failure(
    result: WaitResult,
    message: str,
    classification: Classification | None = None,
    *,
    run_url: str | None = None,
) -> VolcanoJobError:
    """The exception a failed wait raises.

    :param result: how the wait ended.
    :param message: the sentence to raise with.
    :param classification: what the job's pods and events say caused it (``None`` when they
        could not be read: the outcome alone decides then).
    :param run_url: the job's W&B run, named in the message of a run stopped from W&B (its
        page there says who stopped it; the trainer is told only that it was).
    """
    kind = classification.kind if classification is not None else _own_kind(result)
    cls = exception_class(result.outcome, kind)
    if run_url and cls is StoppedFromWandbError:
        message = f"{message}; the W&B run: {run_url}"
    job = result.job_ref() if result.uid else None
    return cls(message, job=job, **_fields(cls, result, classification))


def _own_kind(result: WaitResult) -> Kind:
    """The cause the wait's own evidence shows, when no pods were classified: the container
    that cannot start is an image that cannot be had, or a configuration that cannot be met."""
    failure = result.start_failure
    if failure is None:
        return None
    return FailureKind.IMAGE_PULL if failure.image_cannot_be_had else FailureKind.CONTAINER_CONFIG


def _fields(
    cls: type[VolcanoJobError], result: WaitResult, classification: Classification | None
) -> dict[str, Any]:
    """The exception's own fields, from the evidence the wait or its pods gave."""
    if cls is TrainerCrashLoopError and result.crash_loop is not None:
        loop = result.crash_loop
        return {"restarts": loop.restarts, **_where(loop)}
    if issubclass(cls, ContainerStartError) and result.start_failure is not None:
        failure = result.start_failure
        where = {"pod": failure.pod, "task": failure.task, "container": failure.container}
        return where | {"reason": failure.reason, "image": failure.image}
    if cls is TrainingStalledError and result.stall is not None:
        stall = result.stall
        where = {"pod": stall.pod, "task": stall.task, "container": stall.container}
        timing = {"stall_timeout": stall.stall_timeout, "running_for": stall.running_for}
        timing |= {"wandb_step": stall.wandb_step, "wandb_logged_at": stall.wandb_logged_at}
        return where | timing
    failure = classification.failure if classification is not None else None
    if failure is None or not issubclass(cls, ContainerError) or result.outcome not in CLASSIFIED:
        return {}
    return _where(failure)


def _where(container: Any) -> dict[str, Any]:
    """Which pod, task and container failed, and how: a ``ContainerError``'s fields."""
    return {
        "pod": container.pod,
        "task": container.task,
        "container": container.container,
        "reason": container.reason,
        "exit_code": container.exit_code,
    }

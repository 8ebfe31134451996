"""Which exception a failed wait raises: its outcome, and the cause the job's pods show."""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.exceptions import (
    ApiserverUnreachableError,
    ContainerError,
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

_BY_KIND: dict[FailureKind, type[VolcanoJobError]] = {
    FailureKind.UNSCHEDULABLE: JobUnschedulableError,
    FailureKind.PREEMPTED: JobPreemptedError,
    FailureKind.IMAGE_PULL: ImagePullError,
    FailureKind.OOM_KILLED: OOMKilledError,
    FailureKind.STOPPED_FROM_WANDB: StoppedFromWandbError,
    FailureKind.EXIT_CODE: TrainerExitError,
    FailureKind.JOB_FAILED: JobFailedError,
}

_BY_OUTCOME: dict[Outcome, type[VolcanoJobError]] = {
    Outcome.FAILED: JobFailedError,
    Outcome.PENDING_TIMEOUT: JobUnschedulableError,
    Outcome.DELETED: JobDeletedError,
    Outcome.WATCH_LOST: ApiserverUnreachableError,
    Outcome.TIMEOUT: JobTimeoutError,
    Outcome.CRASH_LOOP: TrainerCrashLoopError,
    Outcome.STOPPED_FROM_WANDB: StoppedFromWandbError,
    Outcome.STALLED: TrainingStalledError,
}

# Outcomes whose exception the job's pods refine (the cause ``diagnostics.classify`` names).
_CLASSIFIED = (Outcome.FAILED, Outcome.PENDING_TIMEOUT, Outcome.STOPPED_FROM_WANDB)


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
    error = _for_failure(result, message, classification)
    if run_url and isinstance(error, StoppedFromWandbError):
        return _for_failure(result, f"{message}; the W&B run: {run_url}", classification)
    return error


def _for_failure(
    result: WaitResult, message: str, classification: Classification | None
) -> VolcanoJobError:
    job = result.job_ref() if result.uid else None
    if result.outcome is Outcome.CRASH_LOOP and result.crash_loop is not None:
        loop = result.crash_loop
        return TrainerCrashLoopError(message, job=job, restarts=loop.restarts, **_where(loop))
    if result.outcome is Outcome.STALLED and result.stall is not None:
        stall = result.stall
        where = {"pod": stall.pod, "task": stall.task, "container": stall.container}
        timing = {"stall_timeout": stall.stall_timeout, "running_for": stall.running_for}
        timing |= {"wandb_step": stall.wandb_step, "wandb_logged_at": stall.wandb_logged_at}
        return TrainingStalledError(message, job=job, **where, **timing)
    if result.outcome not in _CLASSIFIED or classification is None:
        return _BY_OUTCOME[result.outcome](message, job=job)
    cls = _BY_KIND[classification.kind]
    if result.outcome is Outcome.STOPPED_FROM_WANDB:  # the pods only say which rank
        cls = StoppedFromWandbError
    failure = classification.failure
    if failure is None or not issubclass(cls, ContainerError):
        return cls(message, job=job)
    return cls(message, job=job, **_where(failure))


def _where(container: Any) -> dict[str, Any]:
    """Which pod, task and container failed, and how: a ``ContainerError``'s fields."""
    return {
        "pod": container.pod,
        "task": container.task,
        "container": container.container,
        "reason": container.reason,
        "exit_code": container.exit_code,
    }

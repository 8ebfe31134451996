"""The exception a failed wait raises: its ending's class (``job.endings``), with its fields.

A wait ends with one of the endings (``judge`` decides it, ``outcome`` words it); for those
that read their pods, the pods and events say what caused it (``diagnostics.classify``, one of
the endings too, ``None`` when they could not be read), and for those it refines, that cause's
row names the class. The class names the cause the next try is told (``resume_cause``).
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.exceptions import (
    ContainerError,
    ContainerStartError,
    StoppedFromWandbError,
    TrainerCrashLoopError,
    TrainingStalledError,
    VolcanoJobError,
)
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.wait.diagnostics import Classification
from airflow_volcano_wandb.wait.outcome import WaitResult


def exception_class(ending: Ending) -> type[VolcanoJobError]:
    """The class a wait that ended so raises (its row names it)."""
    cls: type[VolcanoJobError] = getattr(exceptions, ending.row.error)
    return cls


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
    kind: Ending | None
    if classification is not None:
        kind = classification.kind
    else:  # a container that cannot start says which of its two causes it is
        kind = result.start_failure.cause if result.start_failure is not None else None
    cls = exception_class(result.outcome.refined_by(kind))
    if run_url and cls is StoppedFromWandbError:
        message = f"{message}; the W&B run: {run_url}"
    job = result.job_ref() if result.job_uid else None
    return cls(message, job=job, **_fields(cls, result, classification))


def _fields(
    cls: type[VolcanoJobError], result: WaitResult, classification: Classification | None
) -> dict[str, Any]:
    """The exception's own fields, from the evidence the wait or its pods gave."""
    if cls is TrainerCrashLoopError and (loop := result.crash_loop) is not None:
        return _where(loop, "restarts", "reason", "exit_code")
    if issubclass(cls, ContainerStartError) and (failure := result.start_failure) is not None:
        return _where(failure, "reason", "image")
    if cls is TrainingStalledError and (stall := result.stall) is not None:
        return _where(stall, "stall_timeout", "running_for", "wandb_step", "wandb_logged_at")
    crashed = classification.failure if classification is not None else None
    if crashed is None or not issubclass(cls, ContainerError) or not result.outcome.row.reads_pods:
        return {}
    return _where(crashed, "reason", "exit_code")


def _where(container: Any, *fields: str) -> dict[str, Any]:
    """Which pod, task and container failed, and its ``fields``: the exception's own."""
    return {name: getattr(container, name) for name in ("pod", "task", "container", *fields)}

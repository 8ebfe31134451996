"""The one table of how a wait ends (``job.endings``): each ending's word, its phases, its
class and so its resume cause, and the exception a failed wait raises from it."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.job import resume
from airflow_volcano_wandb.job.endings import Ending, of_phase, of_reason
from airflow_volcano_wandb.wait import failure_exception
from airflow_volcano_wandb.wait.diagnostics import Classification
from airflow_volcano_wandb.wait.outcome import WaitResult

FAILED = [ending for ending in Ending if not ending.succeeded]
CAUSES = [None, *FAILED]
#: Every cause a try may end by (``resume_on`` names the resumable ones).
KNOWN_CAUSES = {*resume.RESUMABLE, exceptions.STOPPED_FROM_WANDB, exceptions.NOT_STARTED}
KNOWN_CAUSES |= {exceptions.UNKNOWN}
#: The outcome words every release has written into trigger events.
OLD_WORDS = [
    "succeeded",
    "failed",
    "deleted",
    "pending_timeout",
    "timeout",
    "crash_loop",
    "stopped_from_wandb",
    "stalled",
    "start_failed",
    "watch_lost",
]


@pytest.mark.parametrize("word", OLD_WORDS)
def test_an_event_an_older_release_stored_still_reads_back(word) -> None:
    event = {"outcome": word, "name": "j", "namespace": "ns", "uid": "u", "message": "m"}
    assert WaitResult.from_event(event).outcome.value == word


def test_a_phase_is_a_lookup_into_the_table() -> None:
    assert of_phase("Completed") is Ending.SUCCEEDED
    assert {of_phase(p) for p in ("Failed", "Terminated", "Aborted")} == {Ending.FAILED}
    assert of_phase("Running") is None and of_phase("Hibernating") is None


def test_a_reason_a_pod_gives_is_a_lookup_into_the_table_too() -> None:
    assert of_reason("ImagePullBackOff") is Ending.IMAGE_PULL
    assert of_reason("CreateContainerConfigError") is Ending.CONTAINER_CONFIG
    assert of_reason("Evict") is Ending.PREEMPTED and of_reason("OOMKilled") is Ending.OOM_KILLED
    assert of_reason("Error") is None


@pytest.mark.parametrize("ending", FAILED)
def test_each_failed_ending_names_a_public_class_whose_own_cause_is_a_known_one(ending) -> None:
    cls = failure_exception.exception_class(ending)
    assert issubclass(cls, exceptions.VolcanoJobError)
    assert cls.__module__ == exceptions.__name__  # the public import path of retry policies
    assert "resume_cause" in vars(cls)  # named by the class itself, not inherited
    assert cls.resume_cause in KNOWN_CAUSES


@pytest.mark.parametrize("outcome", FAILED)
@pytest.mark.parametrize("cause", CAUSES)
def test_a_failed_wait_raises_the_tables_class(outcome, cause) -> None:
    result = WaitResult(outcome, "j", "ns", "u1", "m")
    classification = Classification(cause) if cause is not None else None
    error = failure_exception.for_failure(result, "m", classification)
    decided = cause if cause is not None and outcome.row.refined else outcome
    assert type(error) is failure_exception.exception_class(decided)
    assert resume.cause_of(error) == type(error).resume_cause


@pytest.mark.parametrize(
    ("outcome", "cause", "cls", "resume_cause"),
    [
        (Ending.FAILED, None, exceptions.JobFailedError, "trainer_failure"),
        (Ending.FAILED, Ending.PREEMPTED, exceptions.JobPreemptedError, "preempted"),
        (Ending.FAILED, Ending.IMAGE_PULL, exceptions.ImagePullError, "not_started"),
        (Ending.FAILED, Ending.OOM_KILLED, exceptions.OOMKilledError, "trainer_failure"),
        (Ending.FAILED, Ending.EXIT_CODE, exceptions.TrainerExitError, "trainer_failure"),
        (Ending.PENDING_TIMEOUT, None, exceptions.JobUnschedulableError, "not_started"),
        (Ending.PENDING_TIMEOUT, Ending.IMAGE_PULL, exceptions.ImagePullError, "not_started"),
        (
            Ending.STOPPED_FROM_WANDB,
            Ending.EXIT_CODE,
            exceptions.StoppedFromWandbError,
            "stopped_from_wandb",
        ),
        (Ending.DELETED, Ending.EXIT_CODE, exceptions.JobDeletedError, "deleted"),
        (Ending.WATCH_LOST, None, exceptions.ApiserverUnreachableError, "unknown"),
        (Ending.TIMEOUT, Ending.PREEMPTED, exceptions.JobTimeoutError, "timeout"),
        (Ending.CRASH_LOOP, None, exceptions.TrainerCrashLoopError, "trainer_failure"),
        (Ending.STALLED, None, exceptions.TrainingStalledError, "trainer_failure"),
        (Ending.START_FAILED, None, exceptions.ContainerStartError, "not_started"),
    ],
)
def test_the_rows_users_rely_on_stay_as_they_were(outcome, cause, cls, resume_cause) -> None:
    classification = Classification(cause) if cause is not None else None
    error = failure_exception.for_failure(
        WaitResult(outcome, "j", "ns", "u1", "m"), "m", classification
    )
    assert type(error) is cls and error.resume_cause == resume_cause

"""The one table of how a failed wait ends (``wait.failure_exception.ENDINGS``): every outcome
and cause its pods may show maps to exactly one exception class, and so one resume cause."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.job import resume
from airflow_volcano_wandb.wait import failure_exception
from airflow_volcano_wandb.wait.diagnostics import Classification, FailureKind
from airflow_volcano_wandb.wait.outcome import Outcome, WaitResult

FAILED_OUTCOMES = [outcome for outcome in Outcome if not outcome.succeeded]
KINDS = [None, *FailureKind]
#: Every cause a try may end by (``resume_on`` names the resumable ones).
CAUSES = {*resume.RESUMABLE, exceptions.STOPPED_FROM_WANDB, exceptions.NOT_STARTED}
CAUSES |= {exceptions.UNKNOWN}


def test_the_table_has_exactly_the_failed_outcomes_and_every_kind_as_its_keys() -> None:
    expected = {(outcome, kind) for outcome in FAILED_OUTCOMES for kind in KINDS}
    assert set(failure_exception.ENDINGS) == expected
    assert all(key[0] is not Outcome.SUCCEEDED for key in failure_exception.ENDINGS)


@pytest.mark.parametrize("outcome", FAILED_OUTCOMES)
@pytest.mark.parametrize("kind", KINDS)
def test_each_pair_has_one_class_whose_own_cause_is_a_known_one(outcome, kind) -> None:
    cls = failure_exception.exception_class(outcome, kind)
    assert issubclass(cls, exceptions.VolcanoJobError)
    assert "resume_cause" in vars(cls)  # named by the class itself, not inherited
    assert failure_exception.resume_cause(outcome, kind) == cls.resume_cause
    assert cls.resume_cause in CAUSES
    assert cls.__module__ == exceptions.__name__  # the public import path of retry policies


@pytest.mark.parametrize("outcome", FAILED_OUTCOMES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_failed_wait_raises_the_tables_class(outcome, kind) -> None:
    result = WaitResult(outcome, "j", "ns", "u1", "m")
    cause = Classification(kind) if kind is not None else None
    error = failure_exception.for_failure(result, "m", cause)
    assert type(error) is failure_exception.ENDINGS[(outcome, kind)]
    assert resume.cause_of(error) == failure_exception.resume_cause(outcome, kind)


@pytest.mark.parametrize(
    ("outcome", "kind", "cls", "cause"),
    [
        (Outcome.FAILED, None, exceptions.JobFailedError, "trainer_failure"),
        (Outcome.FAILED, FailureKind.PREEMPTED, exceptions.JobPreemptedError, "preempted"),
        (Outcome.FAILED, FailureKind.IMAGE_PULL, exceptions.ImagePullError, "not_started"),
        (Outcome.FAILED, FailureKind.OOM_KILLED, exceptions.OOMKilledError, "trainer_failure"),
        (Outcome.FAILED, FailureKind.EXIT_CODE, exceptions.TrainerExitError, "trainer_failure"),
        (Outcome.PENDING_TIMEOUT, None, exceptions.JobUnschedulableError, "not_started"),
        (Outcome.PENDING_TIMEOUT, FailureKind.IMAGE_PULL, exceptions.ImagePullError, "not_started"),
        (
            Outcome.STOPPED_FROM_WANDB,
            FailureKind.EXIT_CODE,
            exceptions.StoppedFromWandbError,
            "stopped_from_wandb",
        ),
        (Outcome.DELETED, FailureKind.EXIT_CODE, exceptions.JobDeletedError, "deleted"),
        (Outcome.WATCH_LOST, None, exceptions.ApiserverUnreachableError, "unknown"),
        (Outcome.TIMEOUT, FailureKind.PREEMPTED, exceptions.JobTimeoutError, "timeout"),
        (Outcome.CRASH_LOOP, None, exceptions.TrainerCrashLoopError, "trainer_failure"),
        (Outcome.STALLED, None, exceptions.TrainingStalledError, "trainer_failure"),
    ],
)
def test_the_rows_users_rely_on_stay_as_they_were(outcome, kind, cls, cause) -> None:
    assert failure_exception.exception_class(outcome, kind) is cls
    assert failure_exception.resume_cause(outcome, kind) == cause

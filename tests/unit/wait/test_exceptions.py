"""The exception raised for each way a wait ends (the classes retry policies match)."""

from __future__ import annotations

import pickle

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.airflow_compat import AirflowException, AirflowTaskTimeout
from airflow_volcano_wandb.wait import failure_exception
from airflow_volcano_wandb.wait.diagnostics import Classification, ContainerFailure, FailureKind
from airflow_volcano_wandb.wait.outcome import Outcome, WaitResult


def _result(outcome: Outcome) -> WaitResult:
    return WaitResult(outcome=outcome, name="j", namespace="ns", uid="u1", message="m")


@pytest.mark.parametrize(
    ("outcome", "cls"),
    [
        (Outcome.FAILED, exceptions.JobFailedError),
        (Outcome.PENDING_TIMEOUT, exceptions.JobUnschedulableError),
        (Outcome.DELETED, exceptions.JobDeletedError),
        (Outcome.WATCH_LOST, exceptions.ApiserverUnreachableError),
        (Outcome.TIMEOUT, exceptions.JobTimeoutError),
    ],
)
def test_every_outcome_has_a_class_and_each_is_an_airflow_exception(outcome, cls):
    error = failure_exception.for_failure(_result(outcome), "m")
    assert type(error) is cls and isinstance(error, AirflowException)
    assert error.job == {"name": "j", "namespace": "ns", "uid": "u1"}


def test_the_timeout_is_airflows_task_timeout_too():
    assert issubclass(exceptions.JobTimeoutError, AirflowTaskTimeout)


def test_a_container_cause_carries_its_exit_code_task_and_pod_and_survives_pickling():
    failure = ContainerFailure("j-master-0", "master", "master", 3, "Error")
    error = failure_exception.for_failure(
        _result(Outcome.FAILED), "m", Classification(FailureKind.EXIT_CODE, failure)
    )
    assert type(error) is exceptions.TrainerExitError
    assert (error.exit_code, error.task, error.pod) == (3, "master", "j-master-0")
    assert str(pickle.loads(pickle.dumps(error))) == "m"


def test_distinct_causes_are_distinct_classes():
    classes = {
        failure_exception.for_failure(_result(Outcome.FAILED), "m", Classification(k)).__class__
        for k in FailureKind
    }
    assert len(classes) == len(FailureKind)

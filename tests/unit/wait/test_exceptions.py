"""The exception raised for each way a wait ends (the classes retry policies match)."""

from __future__ import annotations

import pickle

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.airflow_compat import AirflowException, AirflowTaskTimeout
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.wait import failure_exception
from airflow_volcano_wandb.wait.diagnostics import Classification, ContainerFailure
from airflow_volcano_wandb.wait.outcome import WaitResult


def _result(outcome: Ending) -> WaitResult:
    return WaitResult(outcome=outcome, job_name="j", namespace="ns", job_uid="u1", message="m")


@pytest.mark.parametrize(
    ("outcome", "cls"),
    [
        (Ending.FAILED, exceptions.JobFailedError),
        (Ending.PENDING_TIMEOUT, exceptions.JobUnschedulableError),
        (Ending.DELETED, exceptions.JobDeletedError),
        (Ending.WATCH_LOST, exceptions.ApiserverUnreachableError),
        (Ending.TIMEOUT, exceptions.JobTimeoutError),
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
        _result(Ending.FAILED), "m", Classification(Ending.EXIT_CODE, failure)
    )
    assert type(error) is exceptions.TrainerExitError
    assert (error.exit_code, error.task, error.pod) == (3, "master", "j-master-0")
    assert str(pickle.loads(pickle.dumps(error))) == "m"


def test_distinct_causes_are_distinct_classes():
    classes = {
        failure_exception.for_failure(_result(Ending.FAILED), "m", Classification(k)).__class__
        for k in Ending
        if not k.succeeded
    }
    assert len(classes) == len({k.row.error for k in Ending if not k.succeeded})

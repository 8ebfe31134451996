"""A W&B run stopped from the W&B UI or API: the pure rules (``wait.wandb_stop``, the judge,
``diagnostics.classify``, ``failure_exception``, ``cleanup``). The trainer's side is
tests/trainer/test_train_wandb_stop.py, the cluster's
tests/integration/test_stop_from_wandb_on_cluster.py.
"""

from __future__ import annotations

import json
import pickle

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.airflow_compat import AirflowFailException
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.wait import cleanup, diagnostics, failure_exception
from airflow_volcano_wandb.wait.judge import JobTarget, judge, judge_pods, see
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.wandb_stop import (
    STOPPED_FROM_WANDB_EXIT_CODE,
    STOPPED_FROM_WANDB_MARKER,
    is_stop,
    stopped_rank,
)
from tests.unit.wait.test_restart_budget import pod
from tests.unit.wait.test_wait_verdicts import T0, job

STOP = STOPPED_FROM_WANDB_EXIT_CODE
TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", max_container_restarts=3)
RUNNING = job("Running", running={"master": 1, "worker": 2})
URL = "https://wandb.example/ml-team/volcano-demo/runs/r1"


def test_a_rank_that_exited_with_the_stop_code_is_found_now_and_after_its_restart():
    exiting = [pod("master-0", exit_code=STOP, state="terminated"), pod("worker-0")]
    restarted = [pod("master-0", 1, exit_code=STOP), pod("worker-0")]
    assert stopped_rank(exiting, job_name="j", job_uid="u-1") == "master-0"
    assert stopped_rank(restarted, job_name="j", job_uid="u-1") == "master-0"


def test_under_torchrun_the_termination_message_tells_the_stop_the_exit_code_cannot():
    """``torchrun`` exits 1 whatever its process did; the trainer's termination message stays."""
    torchrun = pod("master-0", 1, exit_code=1)
    torchrun["status"]["containerStatuses"][0]["lastState"]["terminated"]["message"] = (
        f"{STOPPED_FROM_WANDB_MARKER}: https://wandb.example/runs/r1\n"
    )
    assert stopped_rank([torchrun, pod("worker-0")], job_name="j", job_uid="u-1") == "master-0"
    assert is_stop(1, f"{STOPPED_FROM_WANDB_MARKER}: run") and is_stop(STOP, None)
    assert not is_stop(1, "Traceback ... avw-stopped-from-wandb") and not is_stop(1, None)


def test_other_exits_and_other_submissions_are_no_stop():
    assert stopped_rank([pod("master-0", 1, exit_code=3)], job_name="j", job_uid="u-1") is None
    old = [pod("master-0", 1, exit_code=STOP, uid="u-0")]
    assert stopped_rank(old, job_name="j", job_uid="u-1") is None


def test_the_judge_ends_the_wait_of_a_running_job_whose_run_was_stopped_before_the_budget():
    # Every rank of a shared-mode run stops: 3 restarts, within the budget, and still a stop.
    pods = [pod("master-0", 1, exit_code=STOP), pod("worker-0", 1, exit_code=STOP)]
    result = judge(RUNNING, TARGET, T0, pods=pods)
    assert result.outcome is Ending.STOPPED_FROM_WANDB
    assert (result.job_name, result.job_uid, result.phase) == ("j", "u-1", "Running")
    assert "stopped from the W&B UI or API" in result.message
    assert (
        "rank master-0's trainer ended" in result.message and f"exit code {STOP}" in result.message
    )
    assert judge_pods(see(RUNNING, TARGET), TARGET, pods, T0) == result
    assert WaitResult.from_event(json.loads(json.dumps(result.to_event()))) == result


def test_a_stop_wins_over_the_crash_loop_it_causes():
    pods = [pod("master-0", 2, exit_code=STOP), pod("worker-0", 3, exit_code=1)]
    assert judge(RUNNING, TARGET, T0, pods=pods).outcome is Ending.STOPPED_FROM_WANDB


def test_without_a_restart_budget_the_pods_are_not_read_for_a_stop():
    no_budget = JobTarget(job_name="j", namespace="ns", job_uid="u-1")
    assert judge(RUNNING, no_budget, T0, pods=[pod("master-0", 1, exit_code=STOP)]) is None


def _failed_pod(exit_code: int, task: str = "master") -> dict:
    terminated = {"exitCode": exit_code, "reason": "Error"}
    return {
        "metadata": {"name": f"j-{task}-0", "labels": {"volcano.sh/task-spec": task}},
        "status": {
            "phase": "Failed",
            "containerStatuses": [{"name": "pytorch", "state": {"terminated": terminated}}],
        },
    }


def test_a_job_volcano_ended_after_a_stop_is_classified_as_stopped_not_as_an_exit_code():
    # The master's stop ended the job; the worker was killed on the way (exit 143).
    pods = [_failed_pod(STOP), _failed_pod(143, "worker")]
    cause = diagnostics.classify(None, pods, [])
    assert cause.kind is Ending.STOPPED_FROM_WANDB
    assert (cause.failure.task, cause.failure.exit_code) == ("master", STOP)
    result = WaitResult(Ending.FAILED, "j", "ns", "u-1", "Volcano job ns/j failed")
    error = failure_exception.for_failure(result, "m", cause, run_url=URL)
    assert type(error) is exceptions.StoppedFromWandbError
    assert (error.task, error.pod, error.exit_code) == ("master", "j-master-0", STOP)
    assert str(error) == f"m; the W&B run: {URL}"


def test_a_stop_seen_in_the_pods_raises_stopped_from_wandb_error_naming_the_run():
    result = judge(RUNNING, TARGET, T0, pods=[pod("master-0", 1, exit_code=STOP)])
    unread = failure_exception.for_failure(result, result.message, None, run_url=URL)
    assert type(unread) is exceptions.StoppedFromWandbError and unread.pod == ""
    assert str(unread) == f"{result.message}; the W&B run: {URL}"
    # The pods, read for the report, name the rank even when they show another cause first.
    cause = diagnostics.Classification(
        Ending.EXIT_CODE,
        diagnostics.ContainerFailure("j-master-0", "master", "pytorch", STOP, "Error"),
    )
    error = failure_exception.for_failure(result, "m", cause)
    assert type(error) is exceptions.StoppedFromWandbError
    assert (error.pod, error.container, error.exit_code) == ("j-master-0", "pytorch", STOP)
    assert str(failure_exception.for_failure(result, "m", cause)) == "m"  # no URL, none named


def test_stopped_from_wandb_error_is_never_retried_and_still_a_container_error():
    error = exceptions.StoppedFromWandbError("m", job={"name": "j"}, pod="p", exit_code=STOP)
    # Airflow's task runner fails an AirflowFailException without a retry.
    assert isinstance(error, AirflowFailException)
    assert isinstance(error, exceptions.ContainerError)  # what callers caught before
    assert str(pickle.loads(pickle.dumps(error))) == "m"


@pytest.mark.parametrize("action", ["keep", "delete_succeeded", "delete"])
def test_a_job_stopped_from_wandb_is_always_deleted(action):
    assert cleanup.deletes_job(Ending.STOPPED_FROM_WANDB, action)

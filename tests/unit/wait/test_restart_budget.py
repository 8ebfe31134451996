"""The restart budget (pure): what counts as a restart, when a job crash-loops, what it says.

The pods are shaped as the API returns them under ``restartPolicy: OnFailure``: the pod stays
``Running``, ``restartCount`` grows and ``lastState.terminated`` holds the last exit (checked
against the local cluster's simulated kubelet in tests/integration/test_crash_loop_on_cluster).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import yaml

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wait import cleanup, failure_exception
from airflow_volcano_wandb.wait.judge import JobTarget, counts_restarts, judge, see
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.restart_budget import (
    DEFAULT_MAX_CONTAINER_RESTARTS,
    CrashLoop,
    crash_loop,
    rank_of,
    total_restarts,
)
from test_support.airflow_compat import dag_bag
from test_support.waits import operator_trigger, reloaded, sensor_trigger
from tests.unit.wait.test_wait_verdicts import T0, job

REPO = Path(__file__).resolve().parents[3]
SEED_NAME = "volcano-pytorch-queue-template.yaml"


def pod(
    name: str,
    restarts: int = 0,
    *,
    uid: str = "u-1",
    phase: str = "Running",
    exit_code: int | None = 3,
    reason: str = "Error",
    state: str = "running",
    deleting: bool = False,
    init_restarts: int = 0,
) -> dict:
    """A pod of job ``j`` (owner uid ``uid``) whose one container restarted ``restarts`` times;
    ``state="terminated"`` shows it between its exit and its restart."""
    container = {"name": "pytorch", "restartCount": restarts, "state": {state: {}}}
    if exit_code is not None:
        terminated = {"exitCode": exit_code, "reason": reason}
        if state == "terminated":
            container["state"] = {"terminated": terminated}
        elif restarts:
            container["lastState"] = {"terminated": terminated}
    metadata = {"name": f"j-{name}", "ownerReferences": [{"kind": "Job", "uid": uid}]}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    status = {"phase": phase, "containerStatuses": [container]}
    if init_restarts:
        status["initContainerStatuses"] = [{"name": "setup", "restartCount": init_restarts}]
    return {"metadata": metadata, "status": status}


def test_within_the_budget_there_is_no_crash_loop():
    pods = [pod("master-0", 2), pod("worker-0", 1)]
    assert total_restarts(pods) == 3
    assert crash_loop(pods, 3, job_name="j", job_uid="u-1") is None


def test_past_the_budget_the_most_restarted_container_is_named_with_its_last_exit():
    pods = [pod("master-0", 1), pod("worker-1", 3, exit_code=137, reason="OOMKilled")]
    loop = crash_loop(pods, 3, job_name="j", job_uid="u-1")
    assert loop == CrashLoop(
        pod="j-worker-1",
        rank="worker-1",
        container="pytorch",
        restarts=4,
        budget=3,
        container_restarts=3,
        exit_code=137,
        reason="OOMKilled",
    )
    assert loop.task == "worker"
    text = loop.describe()
    assert "rank worker-1" in text and "container pytorch" in text
    assert "last exit code 137 (OOMKilled)" in text and "max_container_restarts=3" in text


def test_the_exit_being_shown_now_wins_over_the_one_before():
    pods = [pod("master-0", 4, state="terminated", exit_code=2, reason="Error")]
    loop = crash_loop(pods, 3, job_name="j")
    assert (loop.exit_code, loop.reason, loop.rank) == (2, "Error", "master-0")


def test_ties_name_the_first_pod_by_name():
    pods = [pod("worker-0", 2), pod("master-0", 2)]
    assert crash_loop(pods, 3, job_name="j").rank == "master-0"


def test_init_containers_count_too():
    assert total_restarts([pod("master-0", 1, init_restarts=2)]) == 3


@pytest.mark.parametrize(
    "other",
    [
        pod("master-0", 9, uid="u-old"),  # an earlier job of the same name
        pod("master-0", 9, deleting=True),  # torn down by a Volcano restart
        pod("master-0", 9, phase="Succeeded"),  # ended: no longer restarting
        pod("master-0", 9, phase="Failed"),
    ],
)
def test_only_live_pods_of_this_submission_count(other):
    assert crash_loop([other, pod("worker-0", 1)], 3, job_name="j", job_uid="u-1") is None


def test_no_budget_counts_nothing_and_zero_allows_no_restart():
    assert crash_loop([pod("master-0", 50)], None, job_name="j") is None
    assert crash_loop([pod("master-0", 0)], 0, job_name="j") is None
    assert crash_loop([pod("master-0", 1)], 0, job_name="j").restarts == 1


def test_a_rank_is_the_pod_name_without_its_job():
    assert rank_of("train-x-worker-12", "train-x") == "worker-12"
    assert rank_of("someone-else", "train-x") == "someone-else"
    assert CrashLoop("p", "chief", "c", 1, 0, 1).task == ""  # no index: no task claimed


TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", max_container_restarts=3)
CRASHING = [pod("master-0", 4), pod("worker-0", 0), pod("worker-1", 0)]


def test_the_judge_ends_the_wait_of_a_running_job_past_its_budget():
    running = job("Running", running={"master": 1, "worker": 2})
    result = judge(running, TARGET, T0, pods=CRASHING)
    assert result.outcome is Ending.CRASH_LOOP
    assert (result.job_uid, result.phase, result.crash_loop.rank) == ("u-1", "Running", "master-0")
    assert "crash-looping" in result.message and "rank master-0" in result.message
    assert judge(running, TARGET, T0, pods=CRASHING[1:]) is None


def test_the_judge_counts_restarts_only_of_a_running_job_with_a_budget():
    running = job("Running", running={"master": 1, "worker": 2})
    assert counts_restarts(see(running, TARGET), TARGET)
    assert not counts_restarts(see(job("Pending"), TARGET), TARGET)
    assert not counts_restarts(see(None, TARGET), TARGET)
    no_budget = JobTarget(job_name="j", namespace="ns", job_uid="u-1")
    assert not counts_restarts(see(running, no_budget), no_budget)
    assert judge(job("Completing"), TARGET, T0, pods=CRASHING) is None


def test_a_job_that_ended_is_judged_by_its_phase_not_its_restarts():
    assert judge(job("Completed"), TARGET, T0, pods=CRASHING).outcome is Ending.SUCCEEDED
    assert judge(job("Failed"), TARGET, T0, pods=CRASHING).outcome is Ending.FAILED


def test_a_crash_loop_round_trips_through_a_trigger_event():
    running = job("Running", running={"master": 1, "worker": 2})
    result = judge(running, TARGET, T0, pods=CRASHING)
    event = json.loads(json.dumps(result.to_event()))
    assert WaitResult.from_event(event) == result
    plain = WaitResult(Ending.FAILED, "j", "ns", "u-1", "why")
    assert WaitResult.from_event(json.loads(json.dumps(plain.to_event()))) == plain


def test_a_crash_loop_raises_trainer_crash_loop_error_naming_the_container():
    result = judge(job("Running", running={"master": 1}), TARGET, T0, pods=CRASHING)
    error = failure_exception.for_failure(result, "m")
    assert type(error) is exceptions.TrainerCrashLoopError
    assert isinstance(error, exceptions.ContainerError)
    assert (error.pod, error.task, error.container) == ("j-master-0", "master", "pytorch")
    assert (error.exit_code, error.reason, error.restarts) == (3, "Error", 4)
    assert error.job == {"name": "j", "namespace": "ns", "uid": "u-1"}
    assert str(pickle.loads(pickle.dumps(error))) == "m"


@pytest.mark.parametrize("action", ["keep", "delete_succeeded", "delete"])
def test_a_crash_looping_job_is_always_deleted(action):
    assert cleanup.deletes_job(Ending.CRASH_LOOP, action)


def test_the_operator_and_the_sensor_hand_their_budget_to_the_serialized_trigger():
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml")
    trigger = operator_trigger(op)
    classpath, kwargs = trigger.serialize()
    assert kwargs["max_container_restarts"] == DEFAULT_MAX_CONTAINER_RESTARTS
    assert reloaded(trigger).serialize() == (classpath, kwargs)
    sensor = VolcanoJobSensor(task_id="w", job_name="j", namespace="ns", max_container_restarts=0)
    target = sensor._target()
    assert target.max_container_restarts == 0
    assert sensor_trigger(sensor).serialize()[1]["max_container_restarts"] == 0
    off = VolcanoPyTorchJobOperator(task_id="t", template="s.yaml", max_container_restarts=None)
    off_kwargs = operator_trigger(off, deferred=False).serialize()[1]
    assert off_kwargs["max_container_restarts"] is None


def test_a_trigger_serialised_before_the_budget_existed_counts_no_restarts():
    assert VolcanoJobTrigger(job_name="j", namespace="ns").spec.max_container_restarts is None


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (True, TypeError), ("3", TypeError)]
)
def test_a_budget_that_is_not_a_count_is_refused(value, error):
    with pytest.raises(error, match="max_container_restarts"):
        VolcanoPyTorchJobOperator(task_id="t", template="s.yaml", max_container_restarts=value)


def test_every_wait_of_the_example_dags_bounds_a_crash_loop_of_the_seed():
    """The seed restarts crashed trainers in place; no example DAG may wait on that for ever."""
    seed = yaml.safe_load((REPO / "dags" / "templates" / SEED_NAME).read_text())
    policies = {task["template"]["spec"]["restartPolicy"] for task in seed["spec"]["tasks"]}
    assert policies == {"OnFailure"}
    waits = [
        task
        for dag in dag_bag(str(REPO / "dags")).dags.values()
        for task in dag.tasks
        if isinstance(task, VolcanoJobSensor)
        or (isinstance(task, VolcanoPyTorchJobOperator) and task.wait_for_completion)
    ]
    assert waits
    assert {task.max_container_restarts for task in waits} == {DEFAULT_MAX_CONTAINER_RESTARTS}

"""The startup budget (``wait/startup.py``) and the judge's use of it: what never starts fails,
what queues or is still being created waits."""

from __future__ import annotations

import json

import pytest

from airflow_volcano_wandb.exceptions import (
    ContainerConfigError,
    ContainerStartError,
    ImagePullError,
)
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.wait import failure_exception
from airflow_volcano_wandb.wait.cleanup import deletes_job
from airflow_volcano_wandb.wait.judge import JobTarget, judge, reads_pods, see
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.startup import StartFailure, start_failure
from airflow_volcano_wandb.wait.step import StepMemory, look

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
PLACED = "2027-01-15T08:00:00Z"
UID = "u-1"


def pod(
    rank: str,
    reason: str | None,
    *,
    placed: bool = True,
    message: str = "",
    last_exit: str | None = None,
    owner: str = UID,
    image: str = "registry.example/trainer:1",
) -> dict:
    status: dict = {"phase": "Pending", "conditions": []}
    if placed:
        status["conditions"] = [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": PLACED}
        ]
        container: dict = {"name": "trainer", "image": "shown:1", "restartCount": 0}
        container["state"] = {"waiting": {"reason": reason, "message": message}} if reason else {}
        if last_exit:
            container["lastState"] = {"terminated": {"exitCode": 1, "finishedAt": last_exit}}
        status["containerStatuses"] = [container]
    return {
        "metadata": {
            "name": f"j-{rank}",
            "namespace": "ns",
            "uid": f"p-{rank}",
            "creationTimestamp": "2027-01-15T07:00:00Z",
            "ownerReferences": [{"uid": owner}],
        },
        "spec": {"containers": [{"name": "trainer", "image": image}]},
        "status": status,
    }


def job(phase: str = "Pending", running: int = 0) -> dict:
    return {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": UID,
            "creationTimestamp": "2027-01-15T07:00:00Z",
        },
        "spec": {
            "minAvailable": 2,
            "tasks": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 1}],
        },
        "status": {
            "state": {"phase": phase},
            "running": running,
            "taskStatusCount": {"master": {"phase": {"Running": running}}} if running else {},
        },
    }


TARGET = JobTarget(job_name="j", namespace="ns", job_uid=UID, startup_timeout=120.0)


def failure(
    pods: list[dict], now: float, budget: float | None = 120.0, not_before: float | None = None
) -> StartFailure | None:
    return start_failure(pods, budget, now, job_name="j", job_uid=UID, not_before=not_before)


@pytest.mark.parametrize("reason", ["InvalidImageName", "ErrImageNeverPull"])
def test_a_reason_that_never_heals_fails_at_once(reason):
    found = failure([pod("worker-0", reason, message="bad ref")], T0 + 1)
    assert found is not None
    assert (found.rank, found.task, found.container, found.reason) == (
        "worker-0",
        "worker",
        "trainer",
        reason,
    )
    assert found.image == "registry.example/trainer:1"  # the spec's, not the status's
    assert found.startup_timeout is None and found.cause is Ending.IMAGE_PULL
    assert "cannot retry its way out" in found.describe()


@pytest.mark.parametrize(
    "reason",
    ["ErrImagePull", "ImagePullBackOff", "CreateContainerConfigError", "CreateContainerError"],
)
def test_a_reason_that_may_heal_fails_only_after_the_budget(reason):
    pods = [pod("master-0", reason, message="not found")]
    assert failure(pods, T0 + 119) is None
    found = failure(pods, T0 + 121)
    assert found is not None and found.reason == reason and found.startup_timeout == 120
    assert "failing for 121s, past startup_timeout=120s" in found.describe()
    assert (found.cause is Ending.IMAGE_PULL) is reason.startswith(("ErrImage", "ImagePull"))


def test_a_container_that_ran_counts_from_its_last_exit():
    # Placed an hour ago; it ran, exited 10 s ago, and now cannot pull its image again.
    pods = [pod("master-0", "ImagePullBackOff", last_exit="2027-01-15T09:00:00Z")]
    assert failure(pods, T0 + 3610) is None
    assert failure(pods, T0 + 3600 + 121) is not None


def test_a_retry_that_just_delivered_the_key_gives_the_kubelet_the_whole_budget():
    # Placed an hour ago, waiting for a key Secret its dead submitter never made; the retry
    # that reattached delivered it 10 s ago and waits since: the kubelet has not retried yet.
    pods = [pod("master-0", "CreateContainerConfigError", message='secret "k" not found')]
    assert failure(pods, T0 + 3600, not_before=T0 + 3590) is None
    found = failure(pods, T0 + 3600 + 121, not_before=T0 + 3600)
    assert found is not None and round(found.failing_for) == 121
    # A reason that never heals does not wait for anything.
    assert failure([pod("master-0", "InvalidImageName")], T0 + 1, not_before=T0 + 1)


@pytest.mark.parametrize(
    "pods",
    [
        [pod("worker-0", None, placed=False)],  # queueing for GPUs: pending_timeout's
        [pod("worker-0", "ContainerCreating")],  # a slow pull of a large image
        [pod("worker-0", "InvalidImageName", owner="u-other")],  # an earlier job of the name
    ],
)
def test_what_queues_is_being_created_or_is_not_ours_never_fails(pods):
    assert failure(pods, T0 + 10_000) is None


def test_no_budget_looks_for_nothing():
    assert failure([pod("worker-0", "InvalidImageName")], T0 + 1, budget=None) is None


def test_the_judge_reads_pods_while_a_rank_has_not_started_and_ends_the_wait():
    pods = [pod("master-0", "ImagePullBackOff"), pod("worker-0", "ImagePullBackOff")]
    seen = see(job(), TARGET)
    assert reads_pods(seen, TARGET)
    assert look(job(), TARGET, StepMemory(), T0).read_pods
    assert judge(job(), TARGET, T0 + 60, pods=pods) is None
    result = judge(job(), TARGET, T0 + 130, pods=pods)
    assert result is not None and result.outcome is Ending.START_FAILED
    assert result.start_failure.rank == "master-0" and result.job_uid == UID
    assert result.message.startswith("Volcano job ns/j cannot start: rank master-0")
    assert WaitResult.from_event(json.loads(json.dumps(result.to_event()))) == result
    off = JobTarget(job_name="j", namespace="ns", job_uid=UID)  # a trigger stored before the budget
    assert not reads_pods(see(job(), off), off)
    assert judge(job(), off, T0 + 10_000, pods=pods) is None


def test_a_whole_gang_is_not_read_for_startup():
    whole = job("Running", running=2)
    whole["status"]["taskStatusCount"] = {
        "master": {"phase": {"Running": 1}},
        "worker": {"phase": {"Running": 1}},
    }
    assert not reads_pods(see(whole, TARGET), TARGET)


@pytest.mark.parametrize(
    ("reason", "cls"),
    [
        ("InvalidImageName", ImagePullError),
        ("ImagePullBackOff", ImagePullError),
        ("CreateContainerConfigError", ContainerConfigError),
    ],
)
def test_the_ending_raises_its_own_class_with_the_containers_fields(reason, cls):
    found = failure([pod("worker-0", reason, message="kubelet words")], T0 + 500)
    result = WaitResult.could_not_start(see(job(), TARGET).status, found)
    error = failure_exception.for_failure(result, result.message)
    assert type(error) is cls and isinstance(error, ContainerStartError)
    assert (error.pod, error.task, error.container, error.reason) == (
        "j-worker-0",
        "worker",
        "trainer",
        reason,
    )
    assert error.image == "registry.example/trainer:1" and error.exit_code is None
    assert error.resume_cause == "not_started" and "kubelet words" in str(error)
    assert deletes_job(Ending.START_FAILED, "keep")  # it holds GPUs: it goes

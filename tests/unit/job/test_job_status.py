"""The pure reading of Volcano job status: every phase, deletion, progress and timing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import interpret

# Volcano's JobPhase values (volcano.sh/apis batch/v1alpha1); the transient ones mean wait.
WAIT_PHASES = ["", "Pending", "Running", "Restarting", "Completing", "Aborting", "Terminating"]

CAPTURED = Path(__file__).resolve().parents[2] / "fixtures" / "volcano_status"


def job(phase: str, **status) -> dict:
    return {
        "metadata": {
            "name": "wandb-job-abc",
            "namespace": "wandb",
            "uid": "u-1",
            "creationTimestamp": "2026-11-29T10:00:00Z",
        },
        "spec": {"tasks": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 3}]},
        "status": {"state": {"phase": phase, **status.pop("state", {})}, **status},
    }


@pytest.mark.parametrize("phase", ["Completed"])
def test_completed_is_success(phase):
    status = interpret(job(phase))
    assert status.ending is Ending.SUCCEEDED and status.terminal


@pytest.mark.parametrize("phase", ["Aborted", "Failed", "Terminated"])
def test_failed_terminated_and_aborted_are_failures(phase):
    status = interpret(job(phase, state={"reason": "PodFailed", "message": "worker-0 exit 3"}))
    assert status.ending is Ending.FAILED
    assert (
        status.explain() == f"Volcano job wandb/wandb-job-abc {phase} (PodFailed: worker-0 exit 3)"
    )


@pytest.mark.parametrize("phase", WAIT_PHASES)
def test_transient_phases_mean_wait(phase):
    assert interpret(job(phase)).ending is None


def test_an_unknown_future_phase_means_wait_not_success():
    assert interpret(job("Hibernating")).ending is None


def test_a_missing_job_is_deleted_and_says_so():
    status = interpret(None, name="wandb-job-abc", namespace="wandb")
    assert status.ending is Ending.DELETED and status.terminal
    assert "wandb/wandb-job-abc was deleted" in status.explain()


def test_restarting_reports_the_retry_count():
    status = interpret(job("Restarting", retryCount=2))
    assert status.ending is None
    assert status.progress().endswith("(retry 2)")


def test_progress_counts_running_and_done_pods_per_task():
    status = interpret(
        job(
            "Running",
            taskStatusCount={
                "master": {"phase": {"Running": 1}},
                "worker": {"phase": {"Running": 2, "Pending": 1}},
            },
        )
    )
    assert status.progress() == "Running: master 1/1, worker 2/3"


def test_progress_mentions_failed_pods():
    status = interpret(
        job("Running", taskStatusCount={"worker": {"phase": {"Running": 2, "Failed": 1}}})
    )
    assert "worker 2/3 (1 failed)" in status.progress()


@pytest.mark.parametrize("path", sorted(CAPTURED.glob("*.json")), ids=lambda p: p.stem)
def test_statuses_captured_from_the_real_cluster(path):
    captured = json.loads(path.read_text())
    status = interpret(captured["job"])
    assert (status.ending or "wait") == captured["expected_verdict"], status
    assert status.phase == captured["job"]["status"]["state"]["phase"]


def test_a_job_being_deleted_counts_as_deleted_at_once():
    deleting = job("Running")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T10:05:00Z"
    status = interpret(deleting)
    assert status.ending is Ending.DELETED and status.terminal
    assert "was deleted" in status.explain()

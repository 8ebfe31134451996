"""What the report of a succeeded job reads: the patch's answer stands for a second read of
the job, and one list of its pods serves the GPU-seconds and the master's log tail."""

from __future__ import annotations

import logging

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.wait import job_report
from airflow_volcano_wandb.wait.outcome import WaitResult

TASK_LOG = logging.getLogger("t")
JOB = {
    "metadata": {"name": "j", "namespace": "ns", "uid": "u-1"},
    "spec": {"tasks": [{"name": "master"}]},
    "status": {"state": {"phase": "Completed"}},
}


class _Counting:
    """A hook that answers with ``JOB`` and its master pod, and counts each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def set_job_annotations(self, name, namespace, uid, annotations) -> dict:
        self.calls.append("patch")
        return {**JOB, "metadata": {**JOB["metadata"], "annotations": dict(annotations)}}

    def get_job(self, name, namespace) -> dict:
        self.calls.append("get")
        return JOB

    def list_job_pods(self, name, namespace) -> list[dict]:
        self.calls.append("list pods")
        return [
            {
                "metadata": {
                    "name": f"{name}-master-0",
                    "annotations": {"volcano.sh/task-spec": "master"},
                },
                "spec": {"containers": [{"name": "master"}]},
                "status": {"phase": "Succeeded"},
            }
        ]

    def read_pod_log(self, pod, namespace, log_lines) -> str:
        self.calls.append("log")
        return "done"


def _succeeded() -> WaitResult:
    return WaitResult(Ending.SUCCEEDED, "j", "ns", "u-1", "Volcano job ns/j Completed")


def test_the_patched_job_is_the_finished_job_without_a_second_read():
    hook = _Counting()
    patched = job_report.mark_reported(hook, _succeeded(), 1, TASK_LOG)
    job = job_report.fetch_finished_job(hook, _succeeded(), TASK_LOG, patched)
    assert job is patched
    assert job["metadata"]["annotations"]
    assert hook.calls == ["patch"]


def test_without_a_patched_job_the_job_is_read():
    hook = _Counting()
    assert job_report.fetch_finished_job(hook, _succeeded(), TASK_LOG) == JOB
    assert hook.calls == ["get"]


def test_nothing_is_patched_for_a_deleted_job():
    hook = _Counting()
    deleted = WaitResult(Ending.DELETED, "j", "ns", "u-1", "gone")
    assert job_report.mark_reported(hook, deleted, 1, TASK_LOG) is None
    assert hook.calls == []


def test_one_list_of_pods_serves_the_gpu_seconds_and_the_master_tail(caplog):
    hook = _Counting()
    with caplog.at_level(logging.INFO):
        pods = job_report.finished_job_pods(hook, JOB, TASK_LOG)
        job_report.log_gpu_seconds(JOB, pods, TASK_LOG)
        job_report.log_master_tail(hook, JOB, 10, TASK_LOG, pods)
    assert hook.calls == ["list pods", "log"]
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "GPU-seconds" in logged and "done" in logged, logged


def test_pods_that_cannot_be_listed_are_a_warning_not_a_failure(caplog):
    hook = _Counting()

    def refused(name, namespace):
        raise PermissionError("no list on pods")

    hook.list_job_pods = refused
    with caplog.at_level(logging.WARNING):
        assert job_report.finished_job_pods(hook, JOB, TASK_LOG) is None
    assert "Could not read the job's pods" in caplog.text

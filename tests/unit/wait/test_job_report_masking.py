"""Pod log lines are masked before the task logs them, not only by the task's log file."""

from __future__ import annotations

import base64
import json
import logging
import secrets

from airflow_volcano_wandb.airflow_compat import mask_secret
from airflow_volcano_wandb.exceptions import TrainingStalledError
from airflow_volcano_wandb.hooks import WandbHook
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.wait import job_report
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.stall import Stall


class _PodLogs:
    """Answers the two reads ``log_master_tail`` makes, with a trainer that prints its key."""

    def __init__(self, line: str) -> None:
        self.line = line

    def list_job_pods(self, name: str, namespace: str) -> list[dict]:
        return [
            {
                "metadata": {
                    "name": f"{name}-master-0",
                    "annotations": {"volcano.sh/task-spec": "master"},
                },
                "status": {"phase": "Succeeded"},
            }
        ]

    def read_pod_log(self, pod: str, namespace: str, log_lines: int) -> str:
        return self.line


def test_a_pod_log_line_carrying_the_key_is_logged_masked(caplog):
    key = "avwtest" + secrets.token_hex(16)
    mask_secret(key)
    job = {
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"tasks": [{"name": "master"}]},
    }
    with caplog.at_level(logging.INFO):
        job_report.log_master_tail(
            _PodLogs(f"[sim] env WANDB_API_KEY={key}"), job, 10, logging.getLogger("t")
        )
    logged = [r.getMessage() for r in caplog.records]
    assert any("WANDB_API_KEY=***" in message for message in logged), logged
    assert not any(key in message for message in logged)


def test_the_keys_encoded_forms_are_logged_masked_once_the_hook_registered_it(caplog, monkeypatch):
    """A failure tail of a trainer that logs its W&B client's headers: the ``Basic``
    credentials and the base64 key are masked, as registered by ``mask_api_key``."""
    key = "avwtest" + secrets.token_hex(16)
    monkeypatch.setenv(
        "AIRFLOW_CONN_WANDB_REPORT_MASK", json.dumps({"conn_type": "wandb", "password": key})
    )
    assert WandbHook("wandb_report_mask").mask_api_key() == key
    basic = base64.b64encode(f"api:{key}".encode()).decode()
    encoded = base64.b64encode(key.encode()).decode()
    job = {"metadata": {"name": "j", "namespace": "ns"}, "spec": {"tasks": [{"name": "master"}]}}
    line = f"send: Authorization: Basic {basic} key64={encoded}"
    with caplog.at_level(logging.INFO):
        job_report.log_master_tail(_PodLogs(line), job, 10, logging.getLogger("t"))
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "send: Authorization: Basic *** key64=***" in logged, logged
    assert basic not in logged and encoded not in logged


class _StalledPods(_PodLogs):
    """Both ranks of a stalled job, running, owned by ``u-1``; each prints the key."""

    def list_job_pods(self, name: str, namespace: str) -> list[dict]:
        return [
            {
                "metadata": {"name": f"{name}-{rank}", "ownerReferences": [{"uid": "u-1"}]},
                "status": {"phase": "Running"},
            }
            for rank in ("worker-0", "master-0")
        ]


def test_the_ranks_last_lines_of_a_stall_are_masked_in_the_log_and_the_exception(caplog):
    key = "avwtest" + secrets.token_hex(16)
    mask_secret(key)
    stall = Stall("j-master-0", "master-0", "pytorch", 60.0, 75.0)
    result = WaitResult(
        Ending.STALLED, "j", "ns", "u-1", "Volcano job ns/j has stalled", stall=stall
    )
    hook = _StalledPods(f"[sim] env WANDB_API_KEY={key}")
    hook.get_job = lambda name, namespace: None
    with caplog.at_level(logging.INFO):
        error = job_report.report_failure(
            hook, result, delete_job=None, log_lines=10, task_log=logging.getLogger("t")
        )
    assert type(error) is TrainingStalledError
    text = str(error)
    assert "the last log lines of each rank:" in text, text
    assert "[master-0] [sim] env WANDB_API_KEY=***" in text, text
    assert text.index("[master-0]") < text.index("[worker-0]")
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert key not in text and key not in logged
    assert "last 10 log lines of j-worker-0:" in logged, logged

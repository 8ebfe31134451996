"""What the Training tab reads (``ui/training_reads``) from a real W&B client and the local
cluster: a W&B run's history from the W&B stand-in (``wandb.Api``'s ``Run.history``, the
SDK's own GraphQL), and a trainer's ``AVW_PROGRESS`` records from its master pod's log (the
simulated container prints one a second, ``podlogs``) with one GET of ``pods/log``.
"""

from __future__ import annotations

import time

import pytest

from airflow_volcano_wandb.testing.cluster.podlogs import PROGRESS_ANNOTATION
from airflow_volcano_wandb.ui import training_reads as reads
from airflow_volcano_wandb.ui.training_view import Series, log_reports
from test_support.cluster_jobs import submit_job
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import API_KEY, use_wandb_connection


def test_the_tab_reads_a_runs_history_through_the_wandb_hook_on_the_standin(monkeypatch):
    with WandbStandin(api_key=API_KEY) as standin:
        conn = use_wandb_connection(monkeypatch, "wandb_tab_history", standin.url)
        standin.add_run("team", "proj", "run-1", summary={"train/total_steps": 3}, state="running")
        for step in (1, 2, 3):
            row = {"train/step": step, "loss": 1 / step}
            standin.log_step("team", "proj", "run-1", step, **row)
        summary, logged = reads.run_history(conn, "run-1", "team", "proj", samples=2)
        assert summary is not None and summary["train/total_steps"] == 3
        # sampled as W&B samples a chart: spread over the run, its last row kept
        assert [(row["train/step"], row["loss"]) for row in logged] == [(1, 1.0), (3, 1 / 3)]
        assert "RunFullHistory" in standin.operations()
        assert reads.run_history(conn, "no-such-run", "team", "proj", 10) == (None, [])
        assert reads.run_url(conn, "run-1", "team", "proj").endswith("/team/proj/runs/run-1")


@pytest.mark.cluster
def test_the_tab_reads_the_masters_progress_records_from_its_log(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    api = volcano_cluster.api_client()
    job = submit_job(api, volcano_namespace, "records", 30, {}, {PROGRESS_ANNOTATION: "300"})
    api.close()
    deadline, reports = time.monotonic() + 90, []
    while len(reports) < 3 and time.monotonic() < deadline:
        time.sleep(2)
        read, pods = reads.job_and_pods(kubernetes_connection, "records", volcano_namespace)
        reports = log_reports(reads.master_log(kubernetes_connection, read, pods))
    assert job["metadata"]["name"] == "records" and len(reports) >= 3, reports
    series = Series.of(reports)
    assert series.last is not None and series.last.total_steps == 300
    assert [r.step for r in reports] == sorted(r.step for r in reports)
    assert series.rate is not None and 1 < series.rate < 100  # 300 steps over 30 s: about 10

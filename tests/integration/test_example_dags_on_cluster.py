"""The example DAGs in dags/, run with dag.test() against the local Volcano cluster.

The retraining DAG and the promotion DAG it schedules through its model asset need a real
scheduler: tests/e2e/test_retraining_assets_e2e.py runs them."""

from __future__ import annotations

import json
import runpy

import pytest

from airflow_volcano_wandb.job.ownership import MAP_INDEX_LABEL
from test_support.cluster_jobs import REPO, list_jobs, run_dag, wait_until, xcoms
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import API_KEY, use_wandb_connection

pytestmark = pytest.mark.cluster

# The deployment's allow-list of the manual DAG's namespaces (dags/volcano_pytorch_manual.py).
MANUAL_NAMESPACES = "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES"


def _use_standin(monkeypatch, standin: WandbStandin) -> None:
    """The ``wandb_default`` connection points at the stand-in, with its key."""
    extra = {"entity": "airflow", "project": "volcano-ddp"}
    use_wandb_connection(monkeypatch, "wandb_default", standin.url, extra=extra)


def test_manual_dag_submits_and_the_sensor_waits_then_leaves_nothing_behind(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, capfd, monkeypatch
):
    monkeypatch.setenv(MANUAL_NAMESPACES, volcano_namespace)
    api = volcano_cluster.api_client()
    _, tis = run_dag(
        "volcano_pytorch_manual",
        file="volcano_pytorch_manual.py",
        namespace=volcano_namespace,
        worker_replicas=3,
    )
    out = capfd.readouterr()
    assert tis == {"submit": ("success", 1), "wait": ("success", 1)}
    assert "worker 3/3" in out.out + out.err  # the form's replicas, as the wait saw them
    # The sensor owns the cleanup: the completed job (and with it its key Secret) is gone.
    wait_until(lambda: not list_jobs(api, volcano_namespace), 60, what="the job deleted")


def test_manual_dag_sensor_reports_to_the_wandb_run_as_the_operator_would_against_wandb_standin(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, monkeypatch
):
    """The UI's path (submit, then a deferrable sensor) gets what a scheduled DAG's operator
    gets: the W&B run's summary in XCom, the task and its outcome written into the run, and
    the run's URL for the "W&B Run" button, on the sensor too."""
    monkeypatch.setenv(MANUAL_NAMESPACES, volcano_namespace)
    summary = {"eval/accuracy": 0.875, "eval/loss": 0.31}
    with WandbStandin(api_key=API_KEY, any_run_summary=summary) as standin:
        standin_url = standin.url
        _use_standin(monkeypatch, standin)
        dag_run, tis = run_dag(
            "volcano_pytorch_manual",
            file="volcano_pytorch_manual.py",
            namespace=volcano_namespace,
            gpus_per_worker=1,
        )
        values = xcoms("volcano_pytorch_manual", dag_run.run_id)
        run_id = values["submit.wandb_run_id"]
        run = standin.run("airflow", "volcano-ddp", run_id)
    assert tis == {"submit": ("success", 1), "wait": ("success", 1)}
    assert values["wait.wandb_run_id"] == run_id
    url = f"{standin_url}/airflow/volcano-ddp/runs/{run_id}"
    assert values["submit.wandb_run_url"] == values["wait.wandb_run_url"] == url
    assert values["wait.wandb_summary"] == summary
    # What the run cost, per rank (1 GPU each). The master's completion ends the job, so its
    # pod is always counted; a worker Volcano removed at that moment is counted from when the
    # gang was whole to the job's end (gpu_usage's documented rule), one that ended first by
    # its pod: every rank is there either way.
    usage = values["wait.gpu_seconds"]
    assert set(usage) == {"master-0", "worker-0"}, usage
    assert usage["master-0"] > 0 and usage["worker-0"] >= 0, usage
    assert run is not None, "the sensor never read or wrote the run"
    record = run.config.get("airflow") or {}
    assert (record.get("task_id"), record.get("outcome")) == ("wait", "success"), run.config
    assert "airflow-success" in run.tags, run.tags


def test_manual_dag_refuses_a_namespace_outside_its_allow_list_before_submitting(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, monkeypatch
):
    """The form may only pick an allowed namespace: another one, even one the connection could
    submit to, fails when the run is created, naming the field, and nothing reaches it."""
    from airflow.sdk.exceptions import ParamValidationError

    monkeypatch.setenv(MANUAL_NAMESPACES, volcano_namespace)
    elsewhere = volcano_cluster.create_namespace("not-allowed")
    try:
        with pytest.raises(ParamValidationError) as refused:
            run_dag("volcano_pytorch_manual", file="volcano_pytorch_manual.py", namespace=elsewhere)
        message = str(refused.value)
        assert "namespace" in message and repr(elsewhere) in message, message
        assert repr([volcano_namespace]) in message, message  # what is allowed instead
        api = volcano_cluster.api_client()
        assert list_jobs(api, elsewhere) == [] and list_jobs(api, volcano_namespace) == []
    finally:
        volcano_cluster.delete_namespace(elsewhere)


def test_sweep_dag_one_job_and_run_per_point_in_one_group_best_offered_against_wandb_standin(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, monkeypatch
):
    """The 6-point grid of dags/volcano_pytorch_sweep.py, deferrable, through dag.test().

    The best run reaches the model asset's event, as a retraining's does; promoting it is
    ``volcano_pytorch_promote``'s decision (tests/e2e/test_retraining_assets_e2e.py).
    """
    from airflow.models.asset import AssetEvent
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_volcano_wandb.testing.recorder import Recorder

    def accuracy(run_id: str) -> dict:
        # Per-run stand-in values that no test arithmetic can line up by accident.
        return {"eval/accuracy": int(run_id[:8], 36) % 997 / 1000}

    grid = runpy.run_path(str(REPO / "dags" / "volcano_pytorch_sweep.py"))["POINTS"]
    api = volcano_cluster.api_client()
    with WandbStandin(api_key=API_KEY, any_run_summary=accuracy) as standin:
        standin_url = standin.url
        _use_standin(monkeypatch, standin)
        with Recorder.jobs(api, volcano_namespace) as recorded:
            dag_run, tis = run_dag(
                "volcano_pytorch_sweep",
                file="volcano_pytorch_sweep.py",
                namespace=volcano_namespace,
                wandb_sweep_id="swp0abc1",
            )
    assert tis["publish_best"][0] == "success"
    values = xcoms("volcano_pytorch_sweep", dag_run.run_id)
    jobs = recorded.seen()
    assert len(grid) == len(jobs) == 6
    env = {
        int(job["metadata"]["labels"][MAP_INDEX_LABEL]): {
            e["name"]: e.get("value")
            for task in job["spec"]["tasks"]
            if task["name"] == "master"
            for e in task["template"]["spec"]["containers"][0]["env"]
        }
        for job in jobs
    }
    assert sorted(env) == list(range(6))  # one job per map index
    run_ids = {e["WANDB_RUN_ID"] for e in env.values()}
    assert len(run_ids) == 6
    assert {e["WANDB_RUN_GROUP"] for e in env.values()} == {f"sweep/mlp-lr-hidden/{dag_run.run_id}"}
    assert {e["WANDB_SWEEP_ID"] for e in env.values()} == {"swp0abc1"}
    for index, point in enumerate(grid):  # each run's hyperparameters and map index
        assert env[index]["AIRFLOW_CTX_MAP_INDEX"] == str(index)
        # The point is the run's config, as W&B Launch hands it to wandb.config.
        assert env[index]["WANDB_LAUNCH"] == "True"
        assert json.loads(env[index]["WANDB_CONFIG"]) == point
    # Every run's summary read back (the link-back may read a run again before writing it).
    asked = [r.variables.get("name") for r in standin.requests if r.operation == "Run"]
    assert set(asked) == run_ids
    winner = values["publish_best.return_value"]
    best_run = max(run_ids, key=lambda run_id: accuracy(run_id)["eval/accuracy"])
    assert winner["wandb_run_id"] == best_run
    assert winner["hyperparameters"] == grid[winner["map_index"]]
    assert env[winner["map_index"]]["WANDB_RUN_ID"] == best_run
    with create_session() as session:
        [event] = session.scalars(
            select(AssetEvent).where(
                AssetEvent.source_dag_id == "volcano_pytorch_sweep",
                AssetEvent.source_run_id == dag_run.run_id,
            )
        ).all()
        extra, asset_name = dict(event.extra), event.asset.name
    assert asset_name == "volcano_pytorch_model"
    assert extra["wandb_run_id"] == best_run
    assert extra["wandb_summary"] == accuracy(best_run)
    assert extra["wandb_run_url"] == f"{standin_url}/airflow/volcano-ddp/runs/{best_run}"
    assert extra["hyperparameters"] == winner["hyperparameters"]

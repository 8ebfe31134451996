"""The Training tab's and page's model (``ui/training_view``, pure)."""

from __future__ import annotations

import json

from airflow_volcano_wandb.ui.training_view import (
    MAX_POINTS,
    Kept,
    Series,
    list_row,
    progress_of,
    task_view,
)
from airflow_volcano_wandb.wait.training_progress import (
    METRICS_XCOM,
    PROGRESS_ANNOTATION,
    Progress,
)

NOW = 1_800_000_000.0
KEY = "wandb-key-0123456789abcdef0123456789abcdef01234567"


def job(phase: str = "Running", annotations: dict | None = None) -> dict:
    template = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "2"}}}]}}
    return {
        "metadata": {"name": "train", "namespace": "ml", "annotations": annotations or {}},
        "spec": {
            "tasks": [
                {"name": "master", "replicas": 1, "template": template},
                {"name": "worker", "replicas": 2, "template": template},
            ]
        },
        "status": {"state": {"phase": phase}},
    }


def pod(rank: str, *, node: str = "node-a", restarts: int = 0, scheduled: str = "True") -> dict:
    return {
        "metadata": {"name": f"train-{rank}", "labels": {"volcano.sh/task-spec": rank[:-2]}},
        "spec": {
            "nodeName": node if scheduled == "True" else None,
            "containers": [
                {
                    "resources": {"limits": {"nvidia.com/gpu": "2"}},
                    "env": [{"name": "WANDB_API_KEY", "value": KEY}],
                }
            ],
        },
        "status": {
            "phase": "Running" if scheduled == "True" else "Pending",
            "startTime": "2027-01-15T07:00:00Z" if scheduled == "True" else None,
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": scheduled,
                    "message": "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
                }
            ],
            "containerStatuses": [{"restartCount": restarts, "state": {"running": {}}}],
        },
    }


RUNNING = Kept.of_xcoms(
    {
        "volcano_job": {"name": "train", "namespace": "ml", "uid": "u-1"},
        "wandb_run_id": "run-1",
        "wandb_run_url": "https://wandb.example/team/proj/runs/run-1",
    },
    "deferred",
)


def test_each_rank_shows_its_task_node_phase_restarts_and_gpus():
    pods = [pod("worker-1", node="node-b", restarts=2), pod("master-0")]
    model = task_view(RUNNING, job(), pods, Series(), NOW, "/dags/d/runs/r/tasks/t")
    assert model["job"] == {"name": "train", "namespace": "ml", "phase": "Running", "gone": False}
    assert [
        (r["rank"], r["task"], r["node"], r["phase"], r["restarts"], r["gpus"])
        for r in model["ranks"]
    ] == [
        ("master-0", "master", "node-a", "Running", 0, 2),
        ("worker-1", "worker", "node-b", "Running", 2, 2),
    ]
    assert model["links"] == {
        "wandb_run": "https://wandb.example/team/proj/runs/run-1",
        "task": "/dags/d/runs/r/tasks/t",
    }
    assert model["gpu_hours"] == 4.0 and model["waiting"] is True  # 2 ranks x 2 GPUs x 1 h


def test_a_gang_waiting_for_room_shows_the_schedulers_reason():
    model = task_view(RUNNING, job("Pending"), [pod("master-0", scheduled="False")], Series(), NOW)
    assert model["pending_reason"] == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


def test_the_bar_has_the_progress_lines_figures_from_two_reads():
    series = Series()
    series.add(Progress(100, NOW - 50, 1000, metrics={"loss": 2.0}))
    series.add(Progress(200, NOW, 1000, metrics={"loss": 1.5}))
    progress = task_view(RUNNING, job(), [], series, NOW)["progress"]
    assert progress == {
        "step": 200,
        "total_steps": 1000,
        "percent": 20.0,
        "epoch": None,
        "epochs": None,
        "rate": 2.0,
        "eta_seconds": 400,
    }


def test_the_chart_keeps_each_metric_over_steps_and_drops_the_steps_a_restart_redoes():
    series = Series()
    for step, loss in ((10, 3.0), (20, 2.5), (30, 2.0)):
        series.add(Progress(step, NOW + step, 100, metrics={"loss": loss, "note": "text"}))
    series.add(Progress(20, NOW + 100, 100, metrics={"loss": 2.4}))  # resumed at a checkpoint
    assert task_view(RUNNING, job(), [], series, NOW)["metrics"] == {"loss": [[10, 3.0], [20, 2.4]]}


def test_a_chart_keeps_at_most_its_last_points():
    series = Series()
    for step in range(MAX_POINTS + 20):
        series.add(Progress(step, NOW + step, metrics={"loss": 1.0}))
    points = series.points["loss"]
    assert len(points) == MAX_POINTS and points[-1][0] == MAX_POINTS + 19


def test_a_summary_gives_the_progress_and_every_numeric_metric():
    summary = {
        "train/step": 5,
        "train/total_steps": 10,
        "_timestamp": NOW,
        "loss": 0.5,
        "lr": 1e-3,
        "tag": "x",
    }
    now = progress_of(summary)
    assert now is not None and now.step == 5 and now.fraction == 0.5
    assert dict(now.metrics) == {"loss": 0.5, "lr": 1e-3}
    assert progress_of({}) is None and progress_of({"loss": 1}) is None


def test_an_ended_job_whose_pods_are_gone_shows_what_the_task_kept():
    kept = Kept.of_xcoms(
        {
            "volcano_job": {"name": "train", "namespace": "ml"},
            "gpu_seconds": {"master-0": 3600.0, "worker-0": 3600.0},
            "wandb_summary": {
                "train/step": 1000,
                "train/total_steps": 1000,
                "_timestamp": NOW,
                "loss": 0.1,
            },
        },
        "success",
    )
    series = Series(rate=2.0)
    model = task_view(kept, None, [], series, NOW)
    assert model["job"]["gone"] is True and model["waiting"] is False
    assert model["progress"]["rate"] is None and model["progress"]["eta_seconds"] is None
    assert model["gpu_hours"] == 2.0
    assert model["progress"]["percent"] == 100.0
    assert model["pending_reason"] == "" and model["ranks"] == []


def test_an_ended_job_without_wandb_draws_the_metrics_its_wait_kept():
    """No W&B run, the pods (and their log) gone: the chart is the ``training_metrics`` XCom
    the finished wait pushed; a malformed point is left out, and a read series comes first."""
    kept = Kept.of_xcoms(
        {
            "volcano_job": {"name": "train", "namespace": "ml"},
            METRICS_XCOM: {
                "train/epoch_loss": [[100, 1.25], [200, 0.5], [300, "NaN"], ["x", 1], [400]],
                "eval/loss": "not a series",
            },
        },
        "success",
    )
    model = task_view(kept, job("Completed"), [], Series(), NOW)
    assert model["metrics"] == {"train/epoch_loss": [[100, 1.25], [200, 0.5]]}
    read = Series.of([Progress(5, NOW, metrics={"loss": 2.0})])
    assert task_view(kept, None, [], read, NOW)["metrics"] == {"loss": [[5, 2.0]]}


def test_a_task_without_a_job_reads_as_not_found():
    assert task_view(Kept(state="success"), None, [], Series(), NOW)["found"] is False


def test_the_model_never_carries_the_key_or_a_non_http_link():
    kept = Kept.of_xcoms(
        {
            "volcano_job": {"name": "train", "namespace": "ml", "secret": KEY},
            "wandb_run_url": "javascript:alert(1)",
        },
        "running",
    )
    model = task_view(kept, job(), [pod("master-0")], Series(), NOW)
    shown = json.dumps(model)
    assert KEY not in shown and "javascript:" not in shown
    assert model["links"]["wandb_run"] is None


def test_a_row_of_the_training_page_reads_the_progress_annotation_and_the_gpus_asked_for():
    line = "progress: step 120/1000 (12 %), epoch 1/5, 2.5 steps/s, ETA 6 min"
    row = list_row("dag", "train", "run", -1, RUNNING, job(annotations={PROGRESS_ANNOTATION: line}))
    assert row["gpus"] == 6 and row["percent"] == 12.0 and row["phase"] == "Running"
    assert row["progress_line"] == line.removeprefix("progress: ") and row["job"] == "train"
    assert list_row("dag", "train", "run", -1, RUNNING, None)["percent"] is None
    # the tab of a job without reports (its pods gone, no W&B): the bar from its kept line
    ended = task_view(RUNNING, job("Completed", {PROGRESS_ANNOTATION: line}), [], Series(), NOW)
    assert ended["progress"] is None and ended["percent"] == 12.0

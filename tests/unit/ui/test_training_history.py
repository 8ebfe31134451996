"""The Training tab's chart and bar from a job's history (``ui/training_view``,
``ui/training_reads``): the W&B run's logged rows, else the master log's ``AVW_PROGRESS``
records; the Training page's rows with their runs' progress; the hooks held between refreshes.
The reads themselves: ``tests/integration/test_training_reads_on_cluster.py``.
"""

from __future__ import annotations

from airflow_volcano_wandb.ui import training_reads as reads
from airflow_volcano_wandb.ui import training_view as view

NOW = 1_800_000_000.0
RUNNING = view.Kept.of_xcoms({"volcano_job": {"name": "train", "namespace": "ml"}}, "deferred")
SUMMARY = {"train/step": 30, "train/total_steps": 100, "_timestamp": NOW + 30, "eval/acc": 0.9}


def rows() -> list[dict]:
    """A run's history: a training row every 10 steps, an eval row (no ``train/step``) after
    the second."""
    logged = [
        {"train/step": step, "train/loss": 3.0 - step / 10, "_step": i, "_timestamp": NOW + step}
        for i, step in enumerate((10, 20, 30))
    ]
    logged.insert(2, {"eval/acc": 0.8, "_step": 9, "_timestamp": NOW + 21})
    return logged


def test_the_chart_draws_each_metric_of_the_runs_history_at_its_training_step():
    series = view.Series.of(view.history_reports(SUMMARY, rows()))
    model = view.task_view(RUNNING, None, [], series, NOW + 40)
    assert model["metrics"] == {
        "train/loss": [[10, 2.0], [20, 1.0], [30, 0.0]],
        "eval/acc": [[20, 0.8]],  # logged after step 20: drawn there, not at its _step
    }
    progress = model["progress"]
    assert (progress["step"], progress["percent"], progress["rate"]) == (30, 30.0, 1.0)
    assert progress["eta_seconds"] == 70


def test_a_run_without_history_rows_shows_its_summary_on_the_bar():
    (only,) = view.history_reports(SUMMARY, [])
    assert (only.step, only.total_steps, dict(only.metrics)) == (30, 100, {"eval/acc": 0.9})
    assert view.history_reports(None, []) == []


def test_the_master_logs_records_give_the_bar_and_their_metrics_the_chart():
    log = "\n".join(
        [
            "2027-01-15T07:00:00.5Z starting",
            '2027-01-15T07:00:10Z AVW_PROGRESS {"step": 100, "total_steps": 400, "loss": 2.5}',
            "2027-01-15T07:00:11Z AVW_PROGRESS {not json",
            '2027-01-15T07:00:20.000000000Z AVW_PROGRESS {"step": 200, "total_steps": 400,'
            ' "loss": 1.5, "epoch": 2}',
            'AVW_PROGRESS {"step": 300}',  # no timestamp: not a line of this read
        ]
    )
    series = view.Series.of(view.log_reports(log))
    model = view.task_view(RUNNING, None, [], series, NOW)
    assert model["metrics"] == {"loss": [[100, 2.5], [200, 1.5]]}
    assert model["progress"]["percent"] == 50.0 and model["progress"]["rate"] == 10.0
    assert model["progress"]["epoch"] == 2


def test_a_row_of_the_training_page_has_its_runs_progress_figures():
    row = view.list_row("dag", "train", "run", -1, RUNNING, None, view.progress_of(SUMMARY))
    assert row["percent"] == 30.0
    assert row["progress"]["step"] == 30 and row["progress"]["total_steps"] == 100


def test_a_connections_hook_is_held_between_refreshes_and_made_again_after_a_failure(
    monkeypatch,
):
    first = reads.volcano_hook("kubernetes_tab_unit")
    assert reads.volcano_hook("kubernetes_tab_unit") is first

    def refused(name: str, namespace: str) -> None:
        raise RuntimeError("401 Unauthorized")

    monkeypatch.setattr(first, "get_job", refused)
    assert reads.job_and_pods("kubernetes_tab_unit", "train", "ml") == (None, [])
    assert reads.volcano_hook("kubernetes_tab_unit") is not first

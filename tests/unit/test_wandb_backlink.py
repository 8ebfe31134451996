"""The Airflow link written into a W&B run: what it adds, what it keeps, what it replaces."""

from __future__ import annotations

from airflow_volcano_wandb.wandb.wandb_backlink import RunFields, airflow_record, with_backlink
from airflow_volcano_wandb.wandb.wandb_run import AirflowRunContext

TASK = AirflowRunContext(
    dag_id="d", dag_run_id="r", task_id="t", try_number=1, task_url="http://a/t"
)


def test_the_link_keeps_the_trainers_fields() -> None:
    before = RunFields({"lr": 0.1}, ["baseline"], "trained on shard 3")
    after = with_backlink(before, TASK, "success")
    assert after.config == {"lr": 0.1, "airflow": airflow_record(TASK, "success")}
    assert after.tags == ["baseline", "airflow", "airflow-success"]
    assert after.notes == "trained on shard 3\nAirflow task: http://a/t (DAG run r, try 1: success)"


def test_a_later_try_replaces_the_outcome() -> None:
    first = with_backlink(RunFields(), TASK, "pending_timeout")
    second = with_backlink(first, TASK, "success")
    assert second.tags == ["airflow", "airflow-success"]
    assert second.notes.count("Airflow task:") == 1
    assert second.config["airflow"]["outcome"] == "success"


def test_a_task_without_a_url_is_named_by_its_ids() -> None:
    bare = AirflowRunContext(dag_id="d", dag_run_id="r", task_id="t", try_number=3)
    assert with_backlink(RunFields(), bare, "failed").notes == (
        "Airflow task: d/t (DAG run r, try 3: failed)"
    )


def test_outcome_tags_stay_within_wandbs_limit() -> None:
    assert all(len(t) <= 64 for t in with_backlink(RunFields(), TASK, "x" * 100).tags)


def test_the_trainers_airflow_entry_is_completed_not_replaced() -> None:
    before = RunFields({"airflow": {"run_id": "r", "host": "pod-0"}})
    record = with_backlink(before, TASK, "success").config["airflow"]
    assert record == {**airflow_record(TASK, "success"), "host": "pod-0"}

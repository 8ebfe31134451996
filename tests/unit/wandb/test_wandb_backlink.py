"""The Airflow link written into a W&B run: what it adds, what it keeps, what it replaces."""

from __future__ import annotations

from airflow_volcano_wandb.wandb.wandb_backlink import (
    RESUME_KEYS,
    RunFields,
    airflow_record,
    with_backlink,
)
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


RESUMED = {
    "resumed_from_intent": 1,
    "resumed_from_step": 593,
    "resumed_from_checkpoint": "/checkpoints/r1/step-000000593.pt",
    "resume_saved_gpu_seconds": 9876.5,
}


def test_a_resumed_try_says_so_in_the_runs_config_and_notes() -> None:
    after = with_backlink(
        RunFields({"lr": 0.1}, [], "trained on shard 3"), TASK, "success", RESUMED
    )
    assert after.config == {"lr": 0.1, "airflow": {**airflow_record(TASK, "success"), **RESUMED}}
    assert after.notes.splitlines() == [
        "trained on shard 3",
        "Resumed from step 593 (checkpoint /checkpoints/r1/step-000000593.pt): "
        "9876.5 GPU-seconds saved",
        "Airflow task: http://a/t (DAG run r, try 1: success)",
    ]
    # Linked again (a later try), the line is not repeated; a second resume adds its own.
    again = with_backlink(after, TASK, "success", RESUMED)
    assert again.notes == after.notes
    later = {**RESUMED, "resumed_from_intent": 2, "resumed_from_step": 900}
    twice = with_backlink(again, TASK, "success", later).notes.splitlines()
    assert [line.split(" (")[0] for line in twice if line.startswith("Resumed")] == [
        "Resumed from step 593",
        "Resumed from step 900",
    ]


def test_what_a_resumed_try_does_not_know_is_left_out() -> None:
    # Failed before the trainer said its step: the intent alone, no notes line.
    failed = with_backlink(RunFields(), TASK, "failed", {"resumed_from_intent": 1, "x": 2})
    assert failed.config["airflow"] == {**airflow_record(TASK, "failed"), "resumed_from_intent": 1}
    assert "Resumed" not in failed.notes
    # A trainer of the older contract says no seconds: no GPU-seconds claimed.
    older = {**RESUMED, "resume_saved_gpu_seconds": None}
    notes = with_backlink(RunFields(), TASK, "success", older).notes
    assert notes.splitlines()[0] == (
        "Resumed from step 593 (checkpoint /checkpoints/r1/step-000000593.pt)"
    )
    plain = with_backlink(RunFields(), TASK, "success", dict.fromkeys(RESUMED))
    assert plain == with_backlink(RunFields(), TASK, "success")


def test_the_resume_keys_are_the_operators_xcoms() -> None:
    from airflow_volcano_wandb.parts import resumption as resume

    assert set(RESUME_KEYS) == {
        resume.XCOM_RESUMED_FROM_INTENT,
        resume.XCOM_RESUMED_FROM_STEP,
        resume.RESUMED_FROM_CHECKPOINT,
        resume.XCOM_RESUME_SAVED_GPU_SECONDS,
    }

"""The trigger's fields as one value (pure), and the one step the trigger and the sensor share."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.triggers.wait_spec import WaitSpec
from airflow_volcano_wandb.wait.judge import GANG_WHOLE_ANNOTATION, JobTarget, WandbRunRef
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.step import StepMemory, look

KEY = "local-0123456789abcdef0123456789abcdef01234567"
CLASSPATH = "airflow_volcano_wandb.triggers.volcano.VolcanoJobTrigger"

# The kwargs as the release before WaitSpec stored them in Airflow's database, every key set.
STORED_BEFORE = {
    "job_name": "wandb-job-abc",
    "namespace": "wandb",
    "job_uid": "u-1",
    "kubernetes_conn_id": "kubernetes_default",
    "config_file": None,
    "cluster_context": "kind",
    "in_cluster": False,
    "pending_timeout": 600.0,
    "deadline": 1_900_000_000.0,
    "poll_interval": 5.0,
    "delete_on_kill": True,
    "watch_failure_grace": 300.0,
    "watch_selector": "app.kubernetes.io/managed-by=airflow-volcano-wandb",
    "try_number": 2,
    "follow_master_log": True,
    "master_log_max_lines": 100,
    "master_log_max_bytes": 4096,
    "masked_secrets": [SecretDigest.of(KEY).to_json()],
    "deferred_at": 1_800_000_000.0,
    "max_container_restarts": 3,
}
#: The same trigger stored again by this release: the keys added since, at their defaults.
STORED_NOW = {
    **STORED_BEFORE,
    "stall_timeout": None,
    "wandb_conn_id": None,
    "wandb_run_id": None,
    "wandb_entity": None,
    "wandb_project": None,
    "startup_timeout": None,
    "waiting_since": None,
    "wandb_stop_grace": None,
    "wandb_summary_keys": None,
}


def test_a_trigger_stored_by_the_previous_release_comes_back_the_same():
    trigger = VolcanoJobTrigger(**json.loads(json.dumps(STORED_BEFORE)))
    assert trigger.serialize() == (CLASSPATH, STORED_NOW)
    assert trigger.spec.target().stall_timeout is None  # no stall limit it never had
    assert trigger.spec.target().startup_timeout is None  # nor a startup budget
    assert trigger.spec.wandb_run() is None  # a silent master is judged by its log alone
    assert (trigger.job_name, trigger.namespace, trigger.job_uid, trigger.try_number) == (
        "wandb-job-abc",
        "wandb",
        "u-1",
        2,
    )


def test_an_older_trigger_without_the_newer_keys_takes_their_defaults():
    """A release before the budget and the settle stored neither key."""
    old = {k: v for k, v in STORED_BEFORE.items() if k not in ("max_container_restarts",)}
    del old["deferred_at"]
    spec = VolcanoJobTrigger(**old).spec
    assert spec.max_container_restarts is None and spec.deferred_at is None


def test_the_stored_kwargs_are_plain_json_and_never_hold_the_key():
    kwargs = WaitSpec.from_kwargs(STORED_BEFORE).to_kwargs()
    text = json.dumps(kwargs)
    assert json.loads(text) == STORED_NOW
    assert KEY not in text


def test_the_job_keeps_its_names_from_the_worker_through_the_trigger_to_the_result():
    """The stored keys are ``WaitSpec``'s fields; the job's fields of ``JobTarget`` and
    ``WaitResult`` are spelt as there, so nothing is renamed on the way."""
    spec = WaitSpec.from_kwargs(STORED_BEFORE)
    fields = [field.name for field in dataclasses.fields(WaitSpec)]
    assert list(VolcanoJobTrigger(**spec.to_kwargs()).serialize()[1]) == fields
    job = {"job_name", "namespace", "job_uid"}
    assert (
        job
        <= {field.name for field in dataclasses.fields(JobTarget)}
        <= set(fields)
        | {
            "pod_check_interval",  # the waiting process's settings, not stored
            "progress_interval",
            "progress_annotation",
        }
    )
    assert job <= {field.name for field in dataclasses.fields(WaitResult)}
    target = spec.target()
    assert (target.job_name, target.job_uid) == (spec.job_name, spec.job_uid)


def test_the_stall_timeouts_wandb_run_is_stored_by_its_connection_id_never_its_key():
    run = {"wandb_conn_id": "wandb_default", "wandb_run_id": "r1", "wandb_project": "p"}
    spec = WaitSpec.from_kwargs({**STORED_BEFORE, "stall_timeout": 60.0, **run})
    assert WaitSpec.from_kwargs(json.loads(json.dumps(spec.to_kwargs()))) == spec
    assert spec.wandb_run() == WandbRunRef("wandb_default", "r1", None, "p")
    assert KEY not in json.dumps(spec.to_kwargs())
    for missing in run:  # no connection, run or project: nothing W&B could be asked
        partial = {k: v for k, v in run.items() if k != missing}
        assert WaitSpec.from_kwargs({**STORED_BEFORE, **partial}).wandb_run() is None


def test_the_trigger_still_takes_its_fields_by_name_and_refuses_unknown_ones():
    trigger = VolcanoJobTrigger("j", "ns", poll_interval=1)
    assert trigger.spec.poll_interval == 1 and trigger.spec.masked_secrets == ()
    with pytest.raises(TypeError, match="no_such_field"):
        VolcanoJobTrigger(job_name="j", namespace="ns", no_such_field=1)


def _job(phase: str, running: int, *, marked: bool = False) -> dict:
    meta = {
        "name": "j",
        "namespace": "ns",
        "uid": "u-1",
        "creationTimestamp": "2026-01-01T00:00:00Z",
    }
    if marked:
        meta["annotations"] = {GANG_WHOLE_ANNOTATION: "2026-01-01T00:00:05Z"}
    return {
        "metadata": meta,
        "spec": {"tasks": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 2}]},
        "status": {
            "state": {"phase": phase},
            "taskStatusCount": {"worker": {"phase": {"Running": running}}} if running else {},
        },
    }


TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", max_container_restarts=2)


def test_one_look_logs_a_changed_line_marks_the_gang_once_and_reads_pods_while_running():
    first = look(_job("Running", 2), TARGET, StepMemory(), 0.0)
    assert first.progress == "Running: master 0/1, worker 2/2"
    assert first.mark is None and first.read_pods and first.result is None
    whole = {**_job("Running", 2)}
    whole["status"]["taskStatusCount"]["master"] = {"phase": {"Running": 1}}
    second = look(whole, TARGET, first.memory, 0.0)
    assert second.mark is not None and second.memory.gang_seen_whole
    third = look(whole, TARGET, second.memory, 0.0)  # the watch's copy may lag the mark
    assert third.mark is None and third.progress is None


def test_the_pods_of_a_running_job_are_read_at_most_every_30_seconds_whatever_wakes_it():
    assert TARGET.pod_check_interval == 30.0  # [volcano_wandb] pod_check_interval's default
    running = _job("Running", 2)
    first = look(running, TARGET, StepMemory(), 100.0)
    assert first.read_pods and first.memory.pods_read_at == 100.0
    ticks = [look(running, TARGET, first.memory, 100.0 + t) for t in (0.5, 10.0, 29.9)]
    assert not any(tick.read_pods for tick in ticks)  # watch events, poll_interval ticks
    due = look(running, TARGET, ticks[-1].memory, 100.0 + 30.0)
    assert due.read_pods and due.memory.pods_read_at == 100.0 + 30.0
    forgot = look(running, TARGET, StepMemory(), 105.0)  # a restarted triggerer reads at once
    assert forgot.read_pods


def test_the_trigger_and_the_sensor_read_pod_check_interval_from_their_config(monkeypatch):
    from airflow_volcano_wandb.sensors import VolcanoJobSensor
    from airflow_volcano_wandb.triggers.volcano import pod_check_interval

    assert pod_check_interval() == 30.0
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "5")
    assert pod_check_interval() == 5.0
    sensor = VolcanoJobSensor(task_id="wait", job_name="j", namespace="ns")
    assert sensor._target().pod_check_interval == 5.0
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "0")
    assert pod_check_interval() == 1.0  # never a LIST per wake again


def test_a_waiter_that_never_saw_the_gang_writes_no_mark_on_a_marked_job():
    whole = _job("Running", 2, marked=True)
    whole["status"]["taskStatusCount"]["master"] = {"phase": {"Running": 1}}
    assert look(whole, TARGET, StepMemory(), 0.0).mark is None


def test_a_look_at_another_submission_judges_the_target_deleted_and_logs_nothing():
    other = _job("Running", 2)
    other["metadata"]["uid"] = "u-2"
    seen = look(other, TARGET, StepMemory(), 0.0)
    assert seen.progress is None and seen.result.outcome is Ending.DELETED
    assert not seen.read_pods

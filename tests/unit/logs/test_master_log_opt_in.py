"""Following the master's log is the DAG's opt-in: the operator's parameters reach the
serialized trigger, its W&B key only as salted digests (``SecretDigest``); the sensor's, in
``tests/unit/sensors/test_volcano.py``. The trigger starts a follow only when asked, and wakes it
when the job's progress changes."""

from __future__ import annotations

import asyncio
import json

from airflow_volcano_wandb.logs import master_log
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wandb.key_forms import key_forms
from test_support.line_log import LineLog
from test_support.waits import operator_trigger, reloaded

KEY = "0123456789abcdef0123456789abcdef01234567"


def test_the_operator_parameters_reach_the_serialized_trigger(monkeypatch):
    monkeypatch.setenv(
        "AIRFLOW_CONN_WANDB_DEFAULT", json.dumps({"conn_type": "wandb", "password": KEY})
    )
    op = VolcanoPyTorchJobOperator(
        task_id="t",
        template="seed.yaml",
        follow_master_log=True,
        master_log_max_lines=10,
        master_log_max_bytes=2048,
    )
    trigger = operator_trigger(op)
    classpath, kwargs = trigger.serialize()
    assert (kwargs["follow_master_log"], kwargs["master_log_max_lines"]) == (True, 10)
    assert kwargs["master_log_max_bytes"] == 2048
    # A digest of each of the key's forms travels to the triggerer; no form of it does.
    digests = [SecretDigest.from_json(d) for d in kwargs["masked_secrets"]]
    assert [d.matches(form) for d, form in zip(digests, key_forms(KEY), strict=True)] == [True] * 3
    assert not any(form in json.dumps(kwargs) for form in key_forms(KEY))
    assert reloaded(trigger).serialize() == (classpath, kwargs)


def test_following_is_off_by_default():
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml")
    kwargs = operator_trigger(op).serialize()[1]
    assert kwargs["follow_master_log"] is False
    assert kwargs["masked_secrets"] == []  # nothing followed: no digest needs to leave


def test_the_logs_progress_records_are_read_only_when_the_wait_reads_no_wandb_run(monkeypatch):
    """The example trainer reports on both channels: a followed log whose wait reads the W&B
    run's progress does not give each tenth a second line."""
    asked: list[bool] = []

    async def fake_follow(*args, progress: bool, **kwargs) -> None:
        asked.append(progress)

    monkeypatch.setattr(master_log, "follow_master_log", fake_follow)
    run = {"wandb_conn_id": "wandb_default", "wandb_run_id": "r1", "wandb_project": "p"}

    async def follow(**wandb: str) -> None:
        trigger = VolcanoJobTrigger(job_name="j", namespace="ns", follow_master_log=True, **wandb)
        await (await trigger._start_log_follow(None))

    asyncio.run(follow())
    asyncio.run(follow(**run))
    assert asked == [True, False]


# ---- the follow itself, against a fake API ---------------------------------------------


def test_the_trigger_follows_only_when_asked(monkeypatch):
    started = []

    async def fake_follow(*args, **kwargs):
        started.append(args[1])
        await asyncio.Event().wait()

    monkeypatch.setattr(master_log, "follow_master_log", fake_follow)

    async def start(follow: bool):
        trigger = VolcanoJobTrigger(job_name="j", namespace="ns", follow_master_log=follow)
        task = await trigger._start_log_follow(None)
        await asyncio.sleep(0)
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        return task

    assert asyncio.run(start(False)) is None
    assert started == []
    assert asyncio.run(start(True)).cancelled()
    assert started == ["j"]


def test_the_trigger_logs_progress_once_per_change_of_phase_or_placed_ranks():
    def job(phase: str, master: dict, worker: dict) -> dict:
        return {
            "metadata": {"name": "j", "namespace": "ns", "uid": "u"},
            "spec": {
                "tasks": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 2}]
            },
            "status": {
                "state": {"phase": phase},
                "taskStatusCount": {"master": {"phase": master}, "worker": {"phase": worker}},
            },
        }

    trigger = VolcanoJobTrigger(job_name="j", namespace="ns")
    log = LineLog()
    trigger._log = log
    calls = JobCallsSeen()
    for state in (
        job("Pending", {"Pending": 1}, {"Pending": 2}),
        job("Pending", {"Running": 1}, {"Pending": 2}),
        job("Pending", {"Running": 1}, {"Pending": 2}),  # unchanged: no line
        job("Running", {"Running": 1}, {"Running": 1, "Pending": 1}),
        job("Running", {"Running": 1}, {"Running": 2}),
        job("Completed", {"Succeeded": 1}, {"Succeeded": 2}),
    ):
        _look(trigger, calls, state)
    assert log.lines == [
        "Pending: master 0/1, worker 0/2",
        "Pending: master 1/1, worker 0/2",
        "Running: master 1/1, worker 1/2",
        "Running: master 1/1, worker 2/2",
        "Completed: master 1/1, worker 2/2",
    ]


def test_the_trigger_wakes_the_follow_when_the_progress_changes():
    trigger = VolcanoJobTrigger(job_name="j", namespace="ns", follow_master_log=True)
    job = {
        "metadata": {"name": "j", "namespace": "ns"},
        "spec": {"tasks": [{"name": "master", "replicas": 1}]},
        "status": {"state": {"phase": "Pending"}},
    }
    calls = JobCallsSeen()
    _look(trigger, calls, job)
    assert trigger._progress_changed.is_set()
    trigger._progress_changed.clear()
    _look(trigger, calls, job)  # the same progress again: nothing new to look for
    assert not trigger._progress_changed.is_set()
    running = {"master": {"phase": {"Running": 1}}}
    job["status"] = {"state": {"phase": "Running"}, "taskStatusCount": running}
    _look(trigger, calls, job)
    assert trigger._progress_changed.is_set()
    assert calls.marks == 1  # the whole gang marked once, on the first look that saw it


class JobCallsSeen:
    """The trigger's calls for one look (``step_io.JobCalls``): only the gang mark is made."""

    def __init__(self) -> None:
        self.marks = 0

    async def annotate(self, job: dict, annotations: dict) -> bool:
        self.marks += 1
        return True


def _look(trigger: VolcanoJobTrigger, calls: JobCallsSeen, job: dict) -> None:
    """One step of the trigger on ``job`` as its watch shows it, without a cluster."""
    asyncio.run(trigger._step(calls, job, trigger.spec.target(), fresh=True, pods=None))

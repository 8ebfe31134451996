"""Following the master's log is the DAG's opt-in: the operator's parameters reach the
serialized trigger, its W&B key only as salted digests (``SecretDigest``); the sensor's, in
``tests/unit/sensors/test_volcano.py``."""

from __future__ import annotations

import asyncio
import json

from airflow_volcano_wandb.logs import master_log
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wandb.key_forms import key_forms
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

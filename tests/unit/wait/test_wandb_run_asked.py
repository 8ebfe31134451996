"""The W&B run a wait asks (its last step, its progress, whether it was stopped): the trigger
and the sensor name it by its connection, id, entity and project, never by its key, and only
for an online run of a connection with a key (``WandbReport.progress_kwargs``,
``WaitSpec.wandb_run``)."""

from __future__ import annotations

import json

import pytest

from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job.ownership import WANDB_RUN_LABEL
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.operator_parts import OperatorParts
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.wait.judge import WandbRunRef
from test_support.waits import operator_trigger, sensor_trigger

WANDB_KEY = "stall" + "0123456789abcdef" * 3


@pytest.fixture
def wandb_conn(monkeypatch) -> str:
    """A ``wandb`` connection with a key, entity and project (read from the environment)."""
    connection = {
        "conn_type": "wandb",
        "password": WANDB_KEY,
        "extra": {"entity": "ml-team", "project": "retraining"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WANDB_STALL", json.dumps(connection))
    return "wandb_stall"


@pytest.mark.parametrize(
    ("mode", "stall_timeout", "grace", "asked"),
    [
        (None, 1800, None, True),
        ("online", 1800, 60, True),
        ("offline", 1800, 60, False),
        ("disabled", 1800, 60, False),
        (None, None, 60, True),  # whether it was stopped (wait.wandb_stop)
        (None, None, None, False),
    ],
)
def test_the_trigger_names_the_online_run_it_asks_never_its_key(
    wandb_conn, mode, stall_timeout, grace, asked
):
    limits = {"stall_timeout": stall_timeout, "wandb_stop_grace": grace}
    op = VolcanoPyTorchJobOperator(
        task_id="t", template="s.yaml", wandb_conn_id=wandb_conn, wandb_mode=mode, **limits
    )
    trigger = operator_trigger(op, run_id="r1")
    kwargs = trigger.serialize()[1]
    assert WANDB_KEY not in json.dumps(kwargs)
    named = WandbRunRef(wandb_conn, "r1", "ml-team", "retraining")
    assert trigger.spec.wandb_run() == (named if asked else None)
    assert (trigger._wandb is not None) == asked
    sensor = VolcanoJobSensor(
        task_id="w",
        job_name="j",
        namespace="ns",
        wandb_conn_id=wandb_conn,
        wandb_mode=mode,
        **limits,
    )
    labelled = {"metadata": {"labels": {WANDB_RUN_LABEL: "r1"}}}
    sensed = sensor_trigger(sensor, labelled)
    assert sensed.spec.wandb_run() == (named if asked else None)
    assert WANDB_KEY not in json.dumps(sensed.serialize()[1])


def test_without_a_key_the_trigger_names_no_run(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WANDB_NOKEY", json.dumps({"conn_type": "wandb"}))
    op = VolcanoPyTorchJobOperator(
        task_id="t", template="s.yaml", stall_timeout=60, wandb_conn_id="wandb_nokey"
    )
    assert OperatorParts.of(op).report.progress_kwargs("r1", True, WandbHook("wandb_nokey")) == {}

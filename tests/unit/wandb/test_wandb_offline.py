"""One meaning of offline: the Airflow process's ``WANDB_MODE`` is the default ``wandb_mode``.

What follows from it is what ``wandb_mode="offline"`` does: the pods run offline, nothing is
written back to W&B, and ``doctor`` needs no key.
"""

from __future__ import annotations

import logging

import pytest

from airflow_volcano_wandb.cli import doctor
from airflow_volcano_wandb.cli.report import OK
from airflow_volcano_wandb.wandb import wandb_backlink
from airflow_volcano_wandb.wandb.wandb_env import container_env
from airflow_volcano_wandb.wandb.wandb_run import AirflowRunContext, WandbRunSpec, effective_mode

CTX = AirflowRunContext(dag_id="d", dag_run_id="r", task_id="t", try_number=1)


@pytest.mark.parametrize(
    ("given", "environ", "mode"),
    [
        (None, {}, None),
        (None, {"WANDB_MODE": ""}, None),
        (None, {"WANDB_MODE": "offline"}, "offline"),
        (None, {"WANDB_MODE": " Disabled "}, "disabled"),
        (None, {"WANDB_MODE": "dryrun"}, "offline"),
        (None, {"WANDB_MODE": "run"}, "online"),
        ("online", {"WANDB_MODE": "offline"}, "online"),  # the DAG's own choice wins
        ("{{ params.mode }}", {"WANDB_MODE": "offline"}, "{{ params.mode }}"),
    ],
)
def test_the_airflow_processs_wandb_mode_is_the_default(given, environ, mode):
    assert effective_mode(given, environ) == mode


def test_an_unknown_wandb_mode_is_refused_by_name():
    with pytest.raises(ValueError, match="WANDB_MODE='ofline'"):
        effective_mode(None, {"WANDB_MODE": "ofline"})


def test_offline_in_the_airflow_process_reaches_the_trainer():
    spec = WandbRunSpec.for_task_instance(CTX, mode=effective_mode(None, {"WANDB_MODE": "offline"}))
    env = {e["name"]: e.get("value") for e in container_env(spec, is_master_task=True)}
    assert env["WANDB_MODE"] == "offline"


class _WandbThatMustNotBeAsked:
    """A hook whose every call is a test failure: an offline run has no server to write to."""

    def edit_run(self, *args, **kwargs):
        raise AssertionError("an offline run wrote back to W&B")


def test_an_offline_run_never_writes_back_even_with_a_key(caplog):
    mode = effective_mode(None, {"WANDB_MODE": "offline"})
    with caplog.at_level(logging.INFO):
        written = wandb_backlink.link_back(
            _WandbThatMustNotBeAsked(),
            CTX,
            "success",
            run_id="r1",
            entity="e",
            project="p",
            mode=mode,
            has_key=True,
            log=logging.getLogger("t"),
        )
    assert written is False
    assert "W&B mode is offline" in caplog.text


def test_doctor_judges_the_key_by_the_same_rule():
    offline = effective_mode(None, {"WANDB_MODE": "offline"}) in ("offline", "disabled")
    result = doctor.check_wandb("wandb_default", False, False, offline)
    assert result.status == OK and "WANDB_MODE is offline" in result.detail


def test_the_operator_and_the_sensor_take_the_airflow_processs_wandb_mode(monkeypatch):
    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
    from airflow_volcano_wandb.parts import options
    from airflow_volcano_wandb.parts.wandb_report import WandbReport
    from airflow_volcano_wandb.sensors import VolcanoJobSensor

    monkeypatch.setenv("WANDB_MODE", "offline")
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml")
    sensor = VolcanoJobSensor(task_id="s", job_name="j")
    for task in (op, sensor):
        report = options.build(WandbReport, task)
        assert (report.wandb_mode, report.online) == ("offline", False)
    chosen = VolcanoPyTorchJobOperator(task_id="o", template="seed.yaml", wandb_mode="online")
    assert options.build(WandbReport, chosen).wandb_mode == "online"  # the DAG's word wins

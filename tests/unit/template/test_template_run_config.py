"""``run_config``: the W&B Launch env on every rank's main container, sliced where long."""

from __future__ import annotations

import json

import pytest

from airflow_volcano_wandb.template import TemplateError
from airflow_volcano_wandb.template.run_config import MAX_ENV_LENGTH, run_config_env
from test_support.template_cases import MACROS, SEED, render_job


def _env(job, task):
    container = job["spec"]["tasks"][task]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def test_every_rank_gets_the_launch_env():
    job = render_job(SEED, macros=MACROS, run_config={"lr": 0.1, "layers": [64, 64]})
    for task in (0, 1):
        env = _env(job, task)
        assert env["WANDB_LAUNCH"] == "True"
        assert json.loads(env["WANDB_CONFIG"]) == {"lr": 0.1, "layers": [64, 64]}


def test_the_provider_owns_the_names_a_stale_one_would_win_over():
    job = render_job(
        SEED,
        macros=MACROS,
        env={"WANDB_CONFIG": '{"lr": 9}', "WANDB_CONFIG_0": "{", "KEEP": "1"},
        run_config={"lr": 0.1},
    )
    env = _env(job, 1)
    assert json.loads(env["WANDB_CONFIG"]) == {"lr": 0.1}
    assert "WANDB_CONFIG_0" not in env and env["KEEP"] == "1"


def test_a_long_config_is_sliced_as_the_launch_agent_slices_it():
    config = {"notes": "x" * (2 * MAX_ENV_LENGTH)}
    entries = run_config_env(config)
    names = [e["name"] for e in entries]
    assert names == ["WANDB_LAUNCH", "WANDB_CONFIG_0", "WANDB_CONFIG_1", "WANDB_CONFIG_2"]
    assert all(len(e["value"]) <= MAX_ENV_LENGTH for e in entries)
    assert json.loads("".join(e["value"] for e in entries[1:])) == config


@pytest.mark.parametrize("run_config", [None, {}])
def test_no_run_config_adds_nothing(run_config):
    job = render_job(SEED, macros=MACROS, run_config=run_config)
    assert not {"WANDB_LAUNCH", "WANDB_CONFIG"} & set(_env(job, 0))


@pytest.mark.parametrize("run_config", [["lr"], {"lr": float("nan")}, {1: 2}])
def test_a_run_config_that_is_not_json_is_refused(run_config):
    with pytest.raises(TemplateError, match="run_config"):
        render_job(SEED, macros=MACROS, run_config=run_config)

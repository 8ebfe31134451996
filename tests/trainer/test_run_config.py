"""``run_config`` reaches the trainer's ``wandb.config`` through the real SDK's Launch path.

Two ranks (``python train.py``, CPU torch) get exactly the env the renderer gives the seed's
master and worker containers for a ``run_config``, the run identity from ``container_env``;
``wandb.init`` in the installed SDK reads ``WANDB_LAUNCH`` + ``WANDB_CONFIG`` (or its slices)
and lays them over the ``TRAIN_*`` values. Offline, the run's ``.wandb`` file shows the config
and the history the trainer followed; online, the W&B stand-in receives the same config.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_volcano_wandb.template import RunEnv
from airflow_volcano_wandb.template.run_config import MAX_ENV_LENGTH
from airflow_volcano_wandb.wandb.wandb_env import container_env
from airflow_volcano_wandb.wandb.wandb_run import SecretKeyRef, WandbRunSpec
from test_support.trainer_runs import (
    AIRFLOW_CTX,
    FAKE_API_KEY,
    _assert_ok,
    _rendered_rank_env,
    _resolve,
    _run_job,
    the_run,
)
from test_support.wandb_standin import WandbStandin

RUN_CONFIG = {"epochs": 2, "hidden_size": 16, "lr": 0.2}

#: Every test here runs the trainer: CPU torch must be installed (tests/trainer/conftest.py).
pytestmark = pytest.mark.usefixtures("torch_installed")


def _spec(mode: str) -> WandbRunSpec:
    return WandbRunSpec.for_task_instance(
        AIRFLOW_CTX,
        project="volcano-demo",
        entity="ml-team",
        mode=mode,
        api_key_secret=SecretKeyRef("wandb-job-key", "api-key"),
    )


def _pod_envs(spec: WandbRunSpec, run_config: dict[str, Any], **extra: str) -> list[dict]:
    rendered = _rendered_rank_env(
        "launch",
        run_config=run_config,
        torchrun_env=False,  # the PET_* env is torchrun's; these ranks run train.py itself
        run_env=RunEnv(
            master=container_env(spec, is_master_task=True),
            others=container_env(spec, is_master_task=False),
        ),
    )
    return [
        {**_resolve(rendered["master"], "launch-master-0"), **extra},
        {**_resolve(rendered["worker"], "launch-worker-0"), **extra},
    ]


def _epochs_trained(history: list[dict[str, Any]]) -> int:
    return len([row for row in history if "train/epoch_loss" in row])


def test_the_run_config_becomes_wandb_config_on_every_rank_offline(tmp_path: Path) -> None:
    spec = _spec("offline")
    # TRAIN_* is the fallback the run config overrides; TRAIN_SEED is one it does not name.
    pod_envs = _pod_envs(spec, RUN_CONFIG, TRAIN_EPOCHS="4", TRAIN_HIDDEN_SIZE="64", TRAIN_SEED="3")
    assert json.loads(pod_envs[1]["WANDB_CONFIG"]) == RUN_CONFIG  # the worker has it too
    results = _run_job(tmp_path, pod_envs)
    _assert_ok(results)
    run = the_run(tmp_path)
    assert {k: run.config[k] for k in RUN_CONFIG} == RUN_CONFIG
    assert run.config["seed"] == 3
    # Both ranks trained the run config's model (DDP fails on ranks whose shapes differ) for
    # its number of epochs.
    assert _epochs_trained(run.history) == 2


def test_a_long_run_config_arrives_in_slices_as_launch_sends_it(tmp_path: Path) -> None:
    notes = "n" * (MAX_ENV_LENGTH + 10)
    pod_envs = _pod_envs(_spec("offline"), {**RUN_CONFIG, "notes": notes})
    assert "WANDB_CONFIG" not in pod_envs[0] and "WANDB_CONFIG_1" in pod_envs[0]
    _assert_ok(_run_job(tmp_path, pod_envs))
    run = the_run(tmp_path)
    assert run.config["notes"] == notes and run.config["epochs"] == 2


def test_the_run_config_reaches_the_wandb_server_online_on_the_standin(
    tmp_path: Path,
) -> None:
    """Against the W&B stand-in: the config the run upserts is the run config's."""
    spec = _spec("online")
    with WandbStandin(api_key=FAKE_API_KEY) as standin:
        pod_envs = _pod_envs(spec, RUN_CONFIG, WANDB_BASE_URL=standin.url, TRAIN_EPOCHS="4")
        _assert_ok(_run_job(tmp_path, pod_envs))
        configs = [
            json.loads(upsert["config"])
            for upsert in standin.upserts
            if upsert.get("name") == spec.run_id and upsert.get("config")
        ]
    assert configs, "the run never sent its config"
    sent = {k: configs[-1][k]["value"] for k in RUN_CONFIG}
    assert sent == RUN_CONFIG

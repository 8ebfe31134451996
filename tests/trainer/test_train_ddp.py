"""The example trainer (``docker/trainer/train.py``) run the way its image runs it.

No Docker engine exists here, so these tests run exactly what the image's ENTRYPOINT runs
(``python train.py``) as 2 local processes on CPU torch, with the env a Volcano job would give
each pod: ``MASTER_ADDR``/``MASTER_PORT``/``RANK``/``WORLD_SIZE`` as the pytorch plugin sets
them, and the W&B + Airflow env built by the provider's own ``container_env`` (the Secret's
key and the Downward API fields resolved the way the kubelet would). W&B runs offline; the
run is checked by reading the offline run's ``.wandb`` file.

W&B's ``shared`` rank mode needs a W&B server (it is a server-side multi-writer mode), which
cannot run here: offline, the trainer falls back to the master rank mode, and that fallback is
what is tested end to end; the online shared-mode ``wandb.init`` arguments are checked against
the installed SDK's ``wandb.Settings`` with ``wandb.init`` replaced by a recorder.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_volcano_wandb.ui.training_view import log_reports
from airflow_volcano_wandb.wait.training_progress import Progress
from airflow_volcano_wandb.wandb.wandb_env import airflow_config_from_env, container_env
from airflow_volcano_wandb.wandb.wandb_run import AirflowRunContext, WandbRunSpec
from test_support.trainer_runs import (
    AIRFLOW_CTX,
    FAKE_API_KEY,
    _assert_key_never_leaked,
    _assert_ok,
    _load_run,
    _require_torch,
    _resolve,
    _run_dirs,
    _run_job,
)
from test_support.wandb_support import keyed_run_spec


def test_master_rank_mode_makes_one_offline_run_with_airflow_context(tmp_path: Path) -> None:
    """Default rank mode, env exactly as the operator builds it: ONE run, owned by rank 0."""
    _require_torch()
    spec = keyed_run_spec(AIRFLOW_CTX, project="volcano-demo", entity="ml-team", mode="offline")
    master_env = _resolve(container_env(spec, is_master_task=True), "job-master-0")
    worker_env = _resolve(container_env(spec, is_master_task=False), "job-worker-0")
    # The contract this test relies on, so a change to it fails here and not in a pod.
    assert master_env["WANDB_RUN_ID"] == spec.run_id
    assert worker_env["WANDB_MODE"] == "disabled" and "WANDB_RUN_ID" not in worker_env
    assert master_env["WANDB_API_KEY"] == FAKE_API_KEY

    started = time.monotonic()
    results = _run_job(tmp_path, [master_env, worker_env])
    elapsed = time.monotonic() - started
    _assert_ok(results)

    run_dirs = _run_dirs(tmp_path)
    assert len(run_dirs) == 1, f"expected one W&B run dir, found {run_dirs}"
    assert run_dirs[0].name.startswith("offline-run-")
    assert run_dirs[0].name.endswith(f"-{spec.run_id}")
    run = _load_run(run_dirs[0])
    assert run.run_id == spec.run_id
    assert run.project == "volcano-demo"
    assert run.group == spec.group
    assert run.job_type == spec.job_type
    assert run.tags == list(spec.tags)

    expected_airflow = {
        "dag_id": AIRFLOW_CTX.dag_id,
        "run_id": AIRFLOW_CTX.dag_run_id,
        "task_id": AIRFLOW_CTX.task_id,
        "try_number": AIRFLOW_CTX.try_number,
        "logical_date": AIRFLOW_CTX.logical_date,
        "task_url": AIRFLOW_CTX.task_url,
    }
    assert run.config["airflow"] == expected_airflow
    assert run.config["airflow"] == airflow_config_from_env(master_env)
    assert run.config["world_size"] == 2
    assert run.config["backend"] == "gloo"
    assert run.config["rank_mode"] == "master"

    epoch_losses = [row["train/epoch_loss"] for row in run.history if "train/epoch_loss" in row]
    step_losses = [row["train/loss"] for row in run.history if "train/loss" in row]
    assert len(epoch_losses) == run.config["epochs"]
    assert epoch_losses[-1] < epoch_losses[0] * 0.5, f"loss did not decrease: {epoch_losses}"
    assert len(step_losses) == run.history[-1]["train/step"]
    accuracy = [row["eval/accuracy"] for row in run.history if "eval/accuracy" in row][-1]
    assert accuracy > 0.7, f"eval/accuracy {accuracy} barely beats chance (0.25)"

    assert "wandb=on" in results[0].output and "wandb=off" in results[1].output
    assert "AVW_TRAIN_RESULT" in results[0].output
    # The progress contract (docs/trainer.md): a record per epoch in rank 0's log only, its
    # step rising to its total, as the provider reads it (training_progress).
    records = [
        Progress.of_log_line(line, 0.0)
        for line in results[0].output.splitlines()
        if line.startswith("AVW_PROGRESS ")
    ]
    assert len(records) == run.config["epochs"] and "AVW_PROGRESS" not in results[1].output
    assert [r.epoch for r in records] == list(range(1, run.config["epochs"] + 1))
    assert records[-1].step == records[-1].total_steps == run.history[-1]["train/step"]
    assert records[0].fraction == 1 / run.config["epochs"]
    # Each record carries its epoch's losses under their W&B names, as the Training tab reads
    # them (its chart without a W&B run): the same values the run logged, and nothing more.
    stamped = [
        f"2027-01-15T07:00:{i:02d}Z {line}"
        for i, line in enumerate(results[0].output.splitlines())
        if line.startswith("AVW_PROGRESS ")
    ]
    charted = [report.metrics for report in log_reports("\n".join(stamped))]
    assert [set(m) for m in charted] == [{"train/epoch_loss", "eval/loss"}] * len(records)
    assert [m["train/epoch_loss"] for m in charted] == pytest.approx(epoch_losses)
    eval_losses = [row["eval/loss"] for row in run.history if "eval/loss" in row]
    assert [m["eval/loss"] for m in charted] == pytest.approx(eval_losses[-len(charted) :])
    _assert_key_never_leaked(tmp_path, results)
    print(f"2-rank DDP job finished in {elapsed:.1f} s")


def test_shared_rank_mode_offline_falls_back_to_one_run(tmp_path: Path) -> None:
    """``shared`` needs W&B online; offline every rank gets the id, yet only rank 0 writes."""
    _require_torch()
    common = {
        "WANDB_PROJECT": "volcano-demo",
        "WANDB_RUN_GROUP": "g",
        "WANDB_JOB_TYPE": "train",
        "WANDB_RESUME": "allow",
        "WANDB_MODE": "offline",
        "WANDB_RUN_ID": "sharedofflinerun1",
        "WANDB_API_KEY": FAKE_API_KEY,
        "AVW_WANDB_RANK_MODE": "shared",
        "AIRFLOW_CTX_DAG_ID": "d",
        "TRAIN_EPOCHS": "2",
    }
    results = _run_job(tmp_path, [dict(common), dict(common)])
    _assert_ok(results)
    run_dirs = _run_dirs(tmp_path)
    assert len(run_dirs) == 1, f"expected one W&B run dir, found {run_dirs}"
    run = _load_run(run_dirs[0])
    assert run.run_id == "sharedofflinerun1"
    assert run.config["airflow"] == {"dag_id": "d"}
    assert "only rank 0 writes" in results[0].output
    assert "wandb=off" in results[1].output
    _assert_key_never_leaked(tmp_path, results)


class _RecordedRun:
    """Stands in for ``wandb.Run`` when ``wandb.init`` is replaced by a recorder."""

    def define_metric(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize("rank", [0, 1])
def test_shared_rank_mode_online_init_arguments(
    trainer: SimpleNamespace, monkeypatch: pytest.MonkeyPatch, rank: int
) -> None:
    """Online shared mode: every rank inits the same id with settings the SDK accepts."""
    import torch
    import wandb

    calls: list[dict[str, Any]] = []

    def record_init(**kwargs: Any) -> _RecordedRun:
        calls.append(kwargs)
        return _RecordedRun()

    monkeypatch.setattr(wandb, "init", record_init)
    environ: Mapping[str, str] = {
        "AVW_WANDB_RANK_MODE": "shared",
        "WANDB_MODE": "shared",
        "WANDB_RUN_ID": "sharedrun",
        "WANDB_TAGS": "airflow,dag:d",
        "AIRFLOW_CTX_DAG_ID": "d",
    }
    plan = trainer.wandb_run.wandb_plan(environ, rank)
    assert plan.init and plan.shared
    info = trainer.process_group.DistInfo(
        rank=rank,
        world_size=2,
        local_rank=0,
        backend="gloo",
        device=torch.device("cpu"),
    )
    trainer.wandb_run.start_wandb(plan, info, trainer.hyperparameters.HyperParams(), environ)
    (kwargs,) = calls
    settings = kwargs["settings"]
    assert isinstance(settings, wandb.Settings)  # built by the installed SDK, so fields exist
    assert settings.mode == "shared"
    assert settings.x_primary is (rank == 0)
    assert settings.x_update_finish_state is (rank == 0)
    assert settings.x_label == f"rank-{rank}"
    assert kwargs["id"] == "sharedrun" and kwargs["tags"] == ["airflow", "dag:d"]
    # The config (hyper-params + Airflow context) is written once, by the primary.
    assert ("config" in kwargs) is (rank == 0)


def test_the_trainer_resumes_its_run_as_the_operator_says(
    trainer: SimpleNamespace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``WANDB_RESUME=must`` on a try that resumes an interrupted run (``resume_on``) reaches
    ``wandb.init``; without it the trainer keeps ``allow``."""
    import torch
    import wandb

    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(wandb, "init", lambda **kwargs: calls.append(kwargs) or _RecordedRun())
    info = trainer.process_group.DistInfo(
        rank=0, world_size=1, local_rank=0, backend=None, device=torch.device("cpu")
    )
    for resume in ("must", None):
        environ = {"WANDB_MODE": "offline", "WANDB_RUN_ID": "run1"}
        environ.update({"WANDB_RESUME": resume} if resume else {})
        plan = trainer.wandb_run.wandb_plan(environ, 0)
        trainer.wandb_run.start_wandb(plan, info, trainer.hyperparameters.HyperParams(), environ)
    assert [kwargs["resume"] for kwargs in calls] == ["must", "allow"]


def test_master_rank_mode_only_rank_zero_inits(trainer: SimpleNamespace) -> None:
    for rank, expected in ((0, True), (1, False), (7, False)):
        plan = trainer.wandb_run.wandb_plan({"WANDB_MODE": "offline"}, rank)
        assert plan.init is expected and not plan.shared
    with pytest.raises(SystemExit):
        trainer.wandb_run.wandb_plan({"AVW_WANDB_RANK_MODE": "everyone"}, 0)


def test_airflow_config_matches_provider(trainer: SimpleNamespace) -> None:
    """The trainer cannot import the provider, so its copy of the env mapping must agree."""
    spec = WandbRunSpec.for_task_instance(
        AirflowRunContext(**{**AIRFLOW_CTX.__dict__, "map_index": 3}), project="p"
    )
    env = _resolve(container_env(spec, is_master_task=True), "pod")
    assert trainer.wandb_run.airflow_config(env) == airflow_config_from_env(env)
    assert trainer.wandb_run.airflow_config(env)["map_index"] == 3
    assert trainer.wandb_run.airflow_config({}) == {}

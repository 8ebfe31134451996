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

import importlib.util
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from airflow_volcano_wandb.testing.cluster.process import free_ports
from airflow_volcano_wandb.wait.training_progress import Progress
from airflow_volcano_wandb.wait.wandb_stop import (
    STOPPED_FROM_WANDB_EXIT_CODE,
    STOPPED_FROM_WANDB_MARKER,
)
from airflow_volcano_wandb.wandb.wandb_env import airflow_config_from_env, container_env
from airflow_volcano_wandb.wandb.wandb_run import AirflowRunContext, WandbRunSpec
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import airflow_run_context, keyed_run_spec, read_wandb_records

REPO = Path(__file__).resolve().parents[2]
TRAIN_PY = REPO / "docker" / "trainer" / "train.py"
LAUNCH_PY = TRAIN_PY.with_name("launch.py")  # the image's ENTRYPOINT
# What the pods would read from the W&B key Secret; must never show up in any output.
FAKE_API_KEY = "avwtest0fake0key0d5a1c3e9b7f2a4c6e8d0b1f3a5c7"
RUN_TIMEOUT_S = 600  # generous: 2 cores shared with a Go build; a normal run takes ~30 s
AIRFLOW_CTX = airflow_run_context(
    dag_id="volcano_pytorch_manual",
    dag_run_id="manual__2026-11-29T10:00:00+00:00",
    logical_date="2026-11-29T10:00:00+00:00",
    task_url="http://localhost:8080/dags/volcano_pytorch_manual/runs/manual__2026-11-29T10%3A00"
    "%3A00%2B00%3A00/tasks/train",
)


def _require_torch() -> None:
    # The brief is "never skip": a missing torch is a broken test environment, said plainly.
    if importlib.util.find_spec("torch") is None:
        pytest.fail(
            "torch is not installed in this environment; the trainer tests need CPU torch. "
            "Install the project's 'train' extra (see docs/trainer.md), e.g. "
            "`uv pip install -e '.[dev,testing,train]'`",
            pytrace=False,
        )


@pytest.fixture(scope="module")
def trainer() -> Iterator[SimpleNamespace]:
    """The trainer's modules imported in-process, by name (``trainer.checkpoints``). They are
    scripts that import each other from beside ``train.py`` (the image's ``/app``), not a
    package, so their folder is on the import path while a test module uses them."""
    _require_torch()
    folder = str(TRAIN_PY.parent)
    sys.path.insert(0, folder)
    try:
        yield SimpleNamespace(
            **{
                path.stem: importlib.import_module(path.stem)
                for path in TRAIN_PY.parent.glob("*.py")
            }
        )
    finally:
        sys.path.remove(folder)


def _resolve(entries: list[dict[str, Any]], pod_name: str) -> dict[str, str]:
    """Turn Kubernetes env entries into plain env, as the kubelet would for a pod."""
    env: dict[str, str] = {}
    for entry in entries:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            env[entry["name"]] = FAKE_API_KEY
        elif entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[entry["name"]] = pod_name
        else:
            raise AssertionError(f"unexpected env entry {entry}")
    return env


def _base_env(tmp_path: Path) -> dict[str, str]:
    """The test process's env minus anything W&B/Airflow/torch.distributed would pick up."""
    drop = ("WANDB_", "AIRFLOW_CTX_", "AVW_", "TRAIN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    env.pop("LOCAL_RANK", None)
    env.update(
        {
            # Keep every W&B file inside tmp_path so the run dirs can be counted.
            "WANDB_DIR": str(tmp_path),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
            "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
            "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
            # Two ranks on two shared cores: one thread each avoids oversubscription.
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@dataclass
class RankResult:
    rank: int
    returncode: int
    output: str


def _start_job(
    tmp_path: Path,
    pod_envs: list[dict[str, str]],
    log_prefix: str = "rank",
    *,
    args: tuple[str, ...] = (str(TRAIN_PY),),
    port: int | None = None,
) -> list[tuple[subprocess.Popen[str], Path]]:
    """Start ``python args`` (the trainer) per pod, with the pytorch plugin's env on ``port``
    (a free one if None); each logs to a file."""
    if port is None:
        (port,) = free_ports(1)
    world_size = len(pod_envs)
    procs: list[tuple[subprocess.Popen[str], Path]] = []
    for rank, pod_env in enumerate(pod_envs):
        env = {
            **_base_env(tmp_path),
            **pod_env,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world_size),
            "RANK": str(rank),
        }
        log = tmp_path / f"{log_prefix}-{rank}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, *args],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        procs.append((proc, log))
    return procs


def _wait_job(procs: list[tuple[subprocess.Popen[str], Path]]) -> list[RankResult]:
    """Wait for every rank of a started job (killing the rest if one hangs)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    results = []
    try:
        for rank, (proc, log) in enumerate(procs):
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            results.append(RankResult(rank, code, log.read_text()))
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _run_job(
    tmp_path: Path, pod_envs: list[dict[str, str]], log_prefix: str = "rank", **start: Any
) -> list[RankResult]:
    """Start one trainer per pod (``_start_job``) and wait for all of them."""
    return _wait_job(_start_job(tmp_path, pod_envs, log_prefix, **start))


@dataclass
class OfflineRun:
    run_dir: Path
    run_id: str
    project: str
    group: str
    job_type: str
    tags: list[str]
    config: dict[str, Any]
    history: list[dict[str, Any]]


def _load_run(run_dir: Path) -> OfflineRun:
    (log,) = run_dir.glob("run-*.wandb")
    run_record = None
    history: list[dict[str, Any]] = []
    for record in read_wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_record = record.run
        elif kind == "history":
            history.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    assert run_record is not None, f"no run record in {log}"
    config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    return OfflineRun(
        run_dir=run_dir,
        run_id=run_record.run_id,
        project=run_record.project,
        group=run_record.run_group,
        job_type=run_record.job_type,
        tags=list(run_record.tags),
        config=config,
        history=history,
    )


def _run_dirs(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "wandb").glob("*run-*") if p.is_dir())


def _assert_key_never_leaked(tmp_path: Path, results: list[RankResult]) -> None:
    for result in results:
        assert FAKE_API_KEY not in result.output, f"rank {result.rank} printed the API key"
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.name.startswith("rank-"):
            assert FAKE_API_KEY.encode() not in path.read_bytes(), f"API key written to {path}"


def _assert_ok(results: list[RankResult]) -> None:
    for result in results:
        assert result.returncode == 0, (
            f"rank {result.rank} exited {result.returncode}:\n{result.output[-4000:]}"
        )


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


def _rendered_rank_env(name: str, **options: Any) -> dict[str, list[dict[str, Any]]]:
    """The env entries the renderer gives the seed's master and worker container (1 worker)."""
    from airflow_volcano_wandb.template import render_job

    job = render_job(
        REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml",
        macros={
            "image_uri": "example.org/trainer:1",
            "run_id": "r1",
            "run_name": "r1",
            "entity_name": "e",
            "project_name": "p",
            "author": "a",
        },
        replicas={"worker": 1},
        name=name,
        namespace="wandb",
        **options,
    )
    return {t["name"]: t["template"]["spec"]["containers"][0]["env"] for t in job["spec"]["tasks"]}


def _torchrun_env(entries: list[dict[str, Any]], node_rank: int, port: int) -> dict[str, str]:
    """PET_* as the kubelet resolves them in a pod, the master's DNS name made local."""
    env = {}
    for entry in entries:
        if not entry["name"].startswith("PET_"):
            continue
        field = entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        if field is not None:
            assert field == "metadata.annotations['hccl/rankIndex']", entry
            env[entry["name"]] = str(node_rank)  # what Volcano's hcclrank plugin writes there
        else:
            env[entry["name"]] = entry["value"]
    return {**env, "PET_MASTER_ADDR": "127.0.0.1", "PET_MASTER_PORT": str(port)}


def test_the_trainer_runs_under_torchrun_with_the_rendered_pet_env(tmp_path: Path) -> None:
    """Two "pods", each a torchrun agent started only with the env the renderer gives it
    (plus the pytorch plugin's), train together over gloo; rank 0 owns the one W&B run."""
    _require_torch()
    rendered = _rendered_rank_env("ddp")
    assert all(any(e["name"] == "PET_NODE_RANK" for e in env) for env in rendered.values())
    pet = {name: {e["name"]: e.get("value") for e in env} for name, env in rendered.items()}
    for task in ("master", "worker"):
        assert pet[task]["PET_NNODES"] == "2" and pet[task]["PET_NPROC_PER_NODE"] == "1"
        assert pet[task]["PET_MASTER_ADDR"] == "ddp-master-0.ddp"
        assert pet[task]["PET_MASTER_PORT"] == "23456"
    spec = WandbRunSpec.for_task_instance(AIRFLOW_CTX, project="p", entity="e", mode="offline")
    wandb_env = {
        "master": _resolve(container_env(spec, is_master_task=True), "ddp-master-0"),
        "worker": _resolve(container_env(spec, is_master_task=False), "ddp-worker-0"),
    }
    pet_port, plugin_port = free_ports(2)
    # The pytorch plugin's env is there too; torchrun gives its processes its own.
    pod_envs = [
        {**wandb_env[task], **_torchrun_env(rendered[task], node_rank, pet_port)}
        for node_rank, task in enumerate(("master", "worker"))
    ]
    torchrun = ("-m", "torch.distributed.run", str(TRAIN_PY))
    results = _run_job(tmp_path, pod_envs, args=torchrun, port=plugin_port)
    _assert_ok(results)
    assert f"joining gloo process group at 127.0.0.1:{pet_port}" in results[0].output
    assert "wandb=on" in results[0].output and "wandb=off" in results[1].output
    assert "AVW_TRAIN_RESULT" in results[0].output
    (run_dir,) = _run_dirs(tmp_path)
    assert _load_run(run_dir).config["world_size"] == 2


def test_ranks_that_disagree_on_the_backend_fail_fast_naming_them(tmp_path: Path) -> None:
    """A CPU-only master (gloo) and a GPU worker (nccl) would hang in DDP; both exit instead."""
    _require_torch()
    base = {"WANDB_MODE": "disabled", "TRAIN_EPOCHS": "1"}
    results = _run_job(
        tmp_path, [{**base, "TRAIN_BACKEND": "gloo"}, {**base, "TRAIN_BACKEND": "nccl"}]
    )
    for result in results:
        assert result.returncode != 0, result.output[-3000:]
        assert "ranks disagree on the torch.distributed backend (rank 0: gloo, rank 1: nccl)" in (
            result.output
        ), result.output[-3000:]


def test_the_image_entrypoint_runs_one_process_per_gpu_on_every_volcano(tmp_path: Path) -> None:
    """Two "pods" with 2 GPUs each, rendered for Volcano v1.12.2 (no ``hcclrank``, so no
    ``PET_NODE_RANK``), each started as the image starts it (``python launch.py``) with only
    the env a pod would have: 4 processes train together over gloo (torch sees no GPU here),
    the world counts processes, and only global rank 0 (master pod, local rank 0) writes W&B."""
    _require_torch()
    gpus = {"limits": {"nvidia.com/gpu": "2"}}
    rendered = _rendered_rank_env(
        "ddp", resources={"master": gpus, "worker": gpus}, volcano_version="v1.12.2"
    )
    spec = WandbRunSpec.for_task_instance(AIRFLOW_CTX, project="p", entity="e", mode="offline")
    (port,) = free_ports(1)
    pod_envs = []
    for node_rank, task in enumerate(("master", "worker")):
        pet = _torchrun_env(rendered[task], node_rank, port)
        assert pet["PET_NPROC_PER_NODE"] == "2" and "PET_NODE_RANK" not in pet
        wandb_env = _resolve(container_env(spec, is_master_task=task == "master"), f"ddp-{task}-0")
        pod_envs.append({**wandb_env, "TRAIN_EPOCHS": "2", **pet})
    # The pytorch plugin's one-process-per-pod env, on the same port as in a pod.
    results = _run_job(tmp_path, pod_envs, args=(str(LAUNCH_PY),), port=port)
    _assert_ok(results)
    master, worker = (r.output for r in results)
    assert "avw-launch: PET_NPROC_PER_NODE=2 PET_NODE_RANK=1: -m torch.distributed.run" in worker
    # Global ranks 0-1 in the master pod, 2-3 in the worker pod, all in one world of 4.
    for rank, output in ((0, master), (1, master), (2, worker), (3, worker)):
        assert f"[rank {rank}/4] epoch 2/2" in output, output[-3000:]
    assert "[rank 0/4] device=cpu wandb=on" in master
    assert "[rank 1/4] device=cpu wandb=off" in master  # the master pod's second process
    assert "wandb=on" not in worker
    (run_dir,) = _run_dirs(tmp_path)
    config = _load_run(run_dir).config
    assert (config["world_size"], config["processes_per_pod"]) == (4, 2)
    _assert_key_never_leaked(tmp_path, results)


def test_a_run_stopped_in_the_wandb_ui_ends_the_trainer_with_the_stop_exit_code(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    """The seed's "stop" button: an online run against the W&B stand-in is stopped while it
    trains (the stand-in's file stream answers ``stopped``, as W&B's does), the SDK calls the
    trainer's ``stop_fn``, and the trainer finishes the run and exits with the documented code
    the provider turns into ``StoppedFromWandbError``.

    The trainer logs at a rate a real job does (a few records a second): one that logs every
    one of thousands of tiny steps a second backs wandb-core up, and the SDK's question "was
    the run stopped?" then waits behind the backlog (docs/trainer.md)."""
    spec = keyed_run_spec(AIRFLOW_CTX, project="volcano-demo", entity="ml-team", mode="online")
    with WandbStandin(api_key=FAKE_API_KEY) as standin:
        env = {
            **_base_env(tmp_path),
            **_resolve(container_env(spec, is_master_task=True), "job-master-0"),
            "WANDB_BASE_URL": standin.url,
            "TRAIN_EPOCHS": "1000000",  # trains until it is stopped
            # Epochs of 1,024 steps, the loss logged every 256 and the evaluation each epoch:
            # a few records a second at this trainer's speed, as a real job logs.
            "TRAIN_TRAIN_SAMPLES": "65536",
            "TRAIN_LOG_EVERY": "256",
            # A pod's /dev/termination-log, which the kubelet turns into the termination message.
            "AVW_TERMINATION_LOG": str(tmp_path / "termination-log"),
        }
        log = tmp_path / "rank-0.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, str(TRAIN_PY)],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            # Stopped once it trains: its first history has reached the file stream.
            deadline = time.monotonic() + RUN_TIMEOUT_S

            def streamed_history() -> bool:
                streams = standin.file_streams(spec.run_id)
                return any("wandb-history.jsonl" in r.variables["files"] for r in streams)

            while not streamed_history():
                assert proc.poll() is None, log.read_text()[-4000:]
                assert time.monotonic() < deadline, "the run never streamed its history"
                time.sleep(0.5)
            standin.stop_run("ml-team", "volcano-demo", spec.run_id)
            code = _wait_for_stop(proc, standin, spec.run_id, log)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = log.read_text()
        streams = [r.status for r in standin.file_streams(spec.run_id)]
        told = standin.stop_told_by(spec.run_id)
        unauthorized = [r.path for r in standin.requests if r.status == 401]
    assert code == trainer.stopping.STOPPED_FROM_WANDB_EXIT_CODE == STOPPED_FROM_WANDB_EXIT_CODE, (
        f"exited {code}:\n{output[-4000:]}"
    )
    # W&B tells a run that it was stopped in its file stream's answers, nowhere else.
    assert told and all(r.path.endswith("/file_stream") for r in told), told
    assert "stopped from the W&B UI or API" in output and "AVW_TRAIN_RESULT" not in output
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith(trainer.stopping.STOPPED_FROM_WANDB_MARKER), message
    assert set(streams) == {200} and unauthorized == [], (streams, unauthorized)
    assert FAKE_API_KEY not in output


#: How long a stop may take to reach the trainer: wandb-core learns it from the file stream's
#: answer (sent every 15 s) and the SDK asks wandb-core every 15 s; 60 s leaves room for both.
STOP_ARRIVES_S = 60


def _wait_for_stop(
    proc: subprocess.Popen[str], standin: WandbStandin, run_id: str, log: Path
) -> int:
    """The trainer's exit code, once the stop has reached it; failing at once with what the
    stand-in received and the trainer's last lines when it has not within a minute."""
    try:
        return proc.wait(timeout=STOP_ARRIVES_S)
    except subprocess.TimeoutExpired:
        received: dict[str, int] = {}
        for request in standin.requests:
            name = request.operation or request.path.partition("?")[0]
            received[name] = received.get(name, 0) + 1
        streams = [
            (r.variables.get("files"), "stopped" if r.told_stopped else "running")
            for r in standin.file_streams(run_id)
        ]
        pytest.fail(
            f"the trainer did not stop within {STOP_ARRIVES_S} s of the stop.\n"
            f"The stand-in received: {received}\nThe file streams (files, answer): {streams}\n"
            f"The trainer's last lines:\n{log.read_text()[-3000:]}",
            pytrace=False,
        )


def test_the_trainer_and_the_provider_agree_on_the_stop_exit_code(trainer: SimpleNamespace) -> None:
    assert trainer.stopping.STOPPED_FROM_WANDB_EXIT_CODE == STOPPED_FROM_WANDB_EXIT_CODE
    assert trainer.stopping.STOPPED_FROM_WANDB_MARKER == STOPPED_FROM_WANDB_MARKER

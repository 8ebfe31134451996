"""The example trainer under torchrun and the image's ENTRYPOINT (``launch.py``): the rendered
PET env, ranks that disagree on the backend, one process per GPU on every Volcano."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_volcano_wandb.testing.cluster.process import free_ports
from airflow_volcano_wandb.wandb.wandb_env import container_env
from airflow_volcano_wandb.wandb.wandb_run import WandbRunSpec
from test_support.trainer_runs import (
    AIRFLOW_CTX,
    LAUNCH_PY,
    TRAIN_PY,
    _assert_key_never_leaked,
    _assert_ok,
    _rendered_rank_env,
    _resolve,
    _run_job,
    the_run,
)

#: Every test here runs the trainer: CPU torch must be installed (tests/trainer/conftest.py).
pytestmark = pytest.mark.usefixtures("torch_installed")


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
    assert the_run(tmp_path).config["world_size"] == 2


def test_ranks_that_disagree_on_the_backend_fail_fast_naming_them(tmp_path: Path) -> None:
    """A CPU-only master (gloo) and a GPU worker (nccl) would hang in DDP; both exit instead."""
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
    config = the_run(tmp_path).config
    assert (config["world_size"], config["processes_per_pod"]) == (4, 2)
    _assert_key_never_leaked(tmp_path, results)

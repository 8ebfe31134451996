"""The example trainer under torchrun's elastic launch (issue 51): two "pods" started only
with the env the renderer gives an ``elastic=(0, 1)`` job, through the image's entrypoint,
train over gloo; the worker pod is lost, the master re-forms alone and goes on from the
newest checkpoint with the new world size, on the same W&B run, to the last step."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from airflow_volcano_wandb.testing.cluster.process import free_ports
from airflow_volcano_wandb.wandb.wandb_env import container_env
from airflow_volcano_wandb.wandb.wandb_run import WandbRunSpec
from test_support.trainer_runs import (
    AIRFLOW_CTX,
    LAUNCH_PY,
    _base_env,
    _load_run,
    _rendered_rank_env,
    _resolve,
    _run_dirs,
)

pytestmark = pytest.mark.usefixtures("torch_installed")

#: Steps of the run: 4096 samples in global batches of 16, four epochs (long enough on two
#: shared cores for the worker to be lost mid-way; a checkpoint every 128 steps).
STEPS = 1024
#: torchrun's defaults wait 30 s for late pods and 15 s to call a silent pod gone; a test
#: on two shared cores cannot, so only these are shortened (the renderer sets none of them).
FAST_RENDEZVOUS = "last_call_timeout=1,keep_alive_interval=1,keep_alive_max_attempt=2"


def _pod_env(tmp_path: Path, task: str, endpoint: str, address: str) -> dict[str, str]:
    """What the kubelet gives the pod: the rendered env, its names made local."""
    rendered = _rendered_rank_env("ddp", elastic=(0, 1))[task]
    env = _resolve(rendered, f"ddp-{task}-0")
    spec = WandbRunSpec.for_task_instance(AIRFLOW_CTX, project="p", entity="e", mode="offline")
    wandb = _resolve(container_env(spec, is_master_task=task == "master"), f"ddp-{task}-0")
    assert env["PET_NNODES"] == "1:2" and env["PET_RDZV_ID"] == "ddp"
    assert env["PET_RDZV_ENDPOINT"] == "ddp-master-0.ddp:23456"
    assert env["PET_RDZV_CONF"] == f"is_host={int(task == 'master')}"  # the master serves it
    return {
        **_base_env(tmp_path),
        **wandb,
        **env,
        # The pods' DNS names, made local: the master's sorts first, as its pod name does.
        "PET_RDZV_ENDPOINT": endpoint,
        "PET_LOCAL_ADDR": address,
        "PET_RDZV_CONF": f"{env['PET_RDZV_CONF']},{FAST_RENDEZVOUS}",
        "AVW_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "AVW_CHECKPOINT_EVERY": "128",
        "TRAIN_EPOCHS": "4",
        "TRAIN_BATCH_SIZE": "16",
        "TRAIN_LOG_EVERY": "128",
    }


def _start(tmp_path: Path, task: str, env: dict[str, str]) -> tuple[subprocess.Popen, Path]:
    log = tmp_path / f"{task}.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(LAUNCH_PY)],
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the pod: its agent and its processes, lost together
        )
    return proc, log


def _lose_pod(proc: subprocess.Popen) -> None:
    """SIGKILL a "pod": its torchrun agent and the processes it started, which torchrun puts
    in sessions of their own (a node's loss takes them all)."""
    pod = [proc.pid, *(child.pid for child in psutil.Process(proc.pid).children(recursive=True))]
    for pid in pod:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    proc.wait()


def _wait_for(log: Path, pattern: str, proc: subprocess.Popen, timeout: float) -> re.Match:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := re.search(pattern, log.read_text()):
            return found
        assert proc.poll() is None, f"exited {proc.returncode}:\n{log.read_text()}"
        time.sleep(0.2)
    raise AssertionError(f"no {pattern!r} in {timeout} s:\n{log.read_text()}")


def test_a_lost_worker_pod_re_forms_the_world_and_the_master_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    (port,) = free_ports(1)
    endpoint = f"127.0.0.1:{port}"
    master, master_log = _start(
        tmp_path, "master", _pod_env(tmp_path, "master", endpoint, "127.0.0.1")
    )
    worker, worker_log = _start(
        tmp_path, "worker", _pod_env(tmp_path, "worker", endpoint, "localhost")
    )
    try:
        _wait_for(master_log, r"elastic world 0: 2 pods", master, 60)
        saved = _wait_for(master_log, r"saved checkpoint \S+step-0*(\d+)\.pt", master, 60)
        _lose_pod(worker)  # the worker's pod is gone, and nothing replaces it
        assert master.wait(timeout=60) == 0, master_log.read_text()
    finally:
        for proc in (master, worker):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    out = master_log.read_text()
    assert "avw-launch:" in out and "torch.distributed.run" in out  # the entrypoint's choice
    # The second world: the master alone, from the newest checkpoint the first one saved.
    first, _, second = out.partition("elastic world 1: 1 pod (the master and 0 of 0..1 workers)")
    assert second, out
    saves = [int(s) for s in re.findall(r"saved checkpoint \S+step-0*(\d+)\.pt", first)]
    assert saves[-1] >= int(saved[1])
    assert re.search(rf"resumed from step {saves[-1]} ", second), second
    assert f'"train/steps": {STEPS}.0' in second
    # Rank 0 stayed on the master pod: every world wrote the one W&B run the operator named.
    runs = [_load_run(d) for d in _run_dirs(tmp_path)]
    assert len(runs) >= 2 and {r.run_id for r in runs} == {runs[0].run_id}
    sizes = [h["elastic/world_size"] for r in runs for h in r.history if "elastic/world_size" in h]
    assert sizes[0] == 2 and sizes[-1] == 1, sizes
    assert "wandb=off" in worker_log.read_text()


@pytest.mark.parametrize("world_size", [1, 2, 3, 5])
def test_every_world_size_shares_the_same_global_batch_and_a_step_means_the_same(
    trainer, world_size: int
) -> None:
    """The effective batch of an elastic job is ``batch_size`` whatever the world: the ranks'
    shares of a step are the global batch, once each, their sizes one apart at most."""
    import torch

    order = torch.randperm(100, generator=torch.Generator().manual_seed(7))
    shares = [
        trainer.model.global_batch_share(order, 3, 16, _info(trainer, rank, world_size))
        for rank in range(world_size)
    ]
    assert {whole for _, whole in shares} == {16}
    taken = torch.cat([idx for idx, _ in shares])
    assert taken.tolist() == order[48:64].tolist()
    assert max(len(i) for i, _ in shares) - min(len(i) for i, _ in shares) <= 1


def test_more_ranks_than_the_global_batch_holds_are_refused_naming_the_batch(trainer) -> None:
    import torch

    with pytest.raises(SystemExit, match="raise TRAIN_BATCH_SIZE"):
        trainer.model.global_batch_share(torch.arange(64), 0, 4, _info(trainer, 0, 5))


def _info(trainer, rank: int, world_size: int):
    import torch

    return trainer.process_group.DistInfo(
        rank, world_size, 0, "gloo", torch.device("cpu"), elastic=(0, 4)
    )


def test_an_elastic_pod_runs_torchrun_even_with_one_process_and_no_fixed_node_rank(trainer):
    elastic = {"PET_RDZV_BACKEND": "c10d", "PET_NPROC_PER_NODE": "1", "RANK": "2"}
    argv, extra = trainer.launch.launch(elastic, ["--epochs=1"], "py", gpus=lambda: 0)
    assert argv == ["py", "-m", "torch.distributed.run", trainer.launch.TRAIN_PY, "--epochs=1"]
    assert extra == {}  # the rendezvous ranks the pods; the plugin's RANK is not one
    argv, _ = trainer.launch.launch({"PET_NPROC_PER_NODE": "1"}, [], "py", gpus=lambda: 0)
    assert argv == ["py", trainer.launch.TRAIN_PY]


def test_a_process_torchrun_restarted_resumes_from_the_newest_checkpoint(trainer, tmp_path):
    plan = trainer.checkpoints.checkpoint_plan
    env = {"AVW_CHECKPOINT_DIR": str(tmp_path)}
    assert plan(env).resume_from is None
    assert plan({**env, "TORCHELASTIC_RESTART_COUNT": "0"}).resume_from is None
    assert plan({**env, "TORCHELASTIC_RESTART_COUNT": "2"}).resume_from == "latest"
    named = {**env, "TORCHELASTIC_RESTART_COUNT": "2", "AVW_RESUME_FROM": "/ckpt/step-1.pt"}
    assert plan(named).resume_from == "/ckpt/step-1.pt"  # a checkpoint named is kept
    assert plan({"TORCHELASTIC_RESTART_COUNT": "2"}).resume_from is None  # nowhere to look


def test_the_elastic_range_is_read_from_the_providers_env(trainer):
    read = trainer.process_group.elastic_workers
    assert read({}) is None and read({"AVW_ELASTIC_WORKERS": "1:4"}) == (1, 4)
    with pytest.raises(SystemExit, match="AVW_ELASTIC_WORKERS='4:1' is not MIN:MAX"):
        read({"AVW_ELASTIC_WORKERS": "4:1"})

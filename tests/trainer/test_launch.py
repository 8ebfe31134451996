"""The trainer image's entrypoint (``docker/trainer/launch.py``): which command a pod runs.

``test_train_ddp.py`` runs it end to end; these check the choice itself for each env a pod can
have (pure: nothing is started), with the pod's GPU count given to ``launch`` as a function,
and the refusal of more processes than GPUs once through ``python launch.py``, with a stand-in
``torch`` module that reports one GPU (no GPU exists here).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

LAUNCH_PY = Path(__file__).resolve().parents[2] / "docker" / "trainer" / "launch.py"
TRAIN_PY = str(LAUNCH_PY.with_name("train.py"))
PLAIN = ["py", TRAIN_PY, "--epochs", "3"]
TORCHRUN = ["py", "-m", "torch.distributed.run", TRAIN_PY, "--epochs", "3"]


@pytest.fixture(scope="module")
def launch() -> ModuleType:
    spec = importlib.util.spec_from_file_location("avw_trainer_launch", LAUNCH_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gpus(count: int | None) -> Callable[[], int | None]:
    """A pod whose processes see ``count`` GPUs (``None``: torch is missing)."""
    return lambda: count


def uncounted() -> int:
    raise AssertionError("the GPUs were counted (import torch) where no count is needed")


@pytest.mark.parametrize("env", [{}, {"PET_NPROC_PER_NODE": "1"}, {"PET_NPROC_PER_NODE": " 1 "}])
def test_one_process_per_pod_runs_train_py_with_the_plugin_env(launch, env) -> None:
    """Without counting GPUs: one process per pod costs no ``import torch``."""
    assert launch.launch({"RANK": "1", **env}, ["--epochs", "3"], "py", gpus=uncounted) == (
        PLAIN,
        {},
    )


@pytest.mark.parametrize(("nproc", "count"), [("8", gpus(8)), ("gpu", uncounted)])
def test_several_run_under_torchrun_which_reads_the_pet_env(launch, nproc, count) -> None:
    env = {"PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": "2", "RANK": "2"}
    assert launch.launch(env, ["--epochs", "3"], "py", gpus=count) == (TORCHRUN, {})


def test_without_hcclrank_the_plugins_rank_is_the_node_rank(launch) -> None:
    """Volcano before v1.12.3: no PET_NODE_RANK; the pod's RANK counts pods, as node ranks do."""
    env = {"PET_NPROC_PER_NODE": "8", "RANK": "3"}
    assert launch.launch(env, ["--epochs", "3"], "py", gpus=gpus(8)) == (
        TORCHRUN,
        {"PET_NODE_RANK": "3"},
    )


@pytest.mark.parametrize(("nproc", "count"), [("2", 1), (" 2 ", 1), ("8", 4), ("3", 2)])
def test_more_processes_than_gpus_are_refused_naming_both_counts(launch, nproc, count) -> None:
    """Two processes on one GPU would end in NCCL's "Duplicate GPU detected" after the ranks
    joined; the launcher stops before starting any."""
    env = {"PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": "0", "RANK": "0"}
    with pytest.raises(SystemExit) as refused:
        launch.launch(env, ["--epochs", "3"], "py", gpus=gpus(count))
    message = str(refused.value.code)
    asked = nproc.strip()
    assert f"PET_NPROC_PER_NODE={asked} asks for {asked} processes in this pod" in message
    assert f"but it has {count} GPU{'' if count == 1 else 's'} " in message
    assert "Duplicate GPU detected" in message and "no process was started" in message


@pytest.mark.parametrize(("nproc", "count"), [("2", 2), ("4", 8)])
def test_as_many_processes_as_gpus_or_fewer_run(launch, nproc, count) -> None:
    env = {"PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": "0"}
    assert launch.launch(env, ["--epochs", "3"], "py", gpus=gpus(count)) == (TORCHRUN, {})


@pytest.mark.parametrize("count", [0, None])
def test_without_a_gpu_several_processes_run_on_cpu_as_before(launch, count) -> None:
    """No GPU (CPU torch, a CPU-only node) or no torch to ask: the processes run as asked, on
    CPU over gloo (or ``torchrun`` fails on its own without torch)."""
    env = {"PET_NPROC_PER_NODE": "2", "PET_NODE_RANK": "0"}
    assert launch.launch(env, ["--epochs", "3"], "py", gpus=gpus(count)) == (TORCHRUN, {})


def test_the_pods_gpus_are_the_ones_torch_counts(launch) -> None:
    """What the trainer's ``process_group.py`` places ranks on: here CPU torch, so none."""
    seen = launch.visible_gpus()
    import torch

    assert seen == torch.cuda.device_count()


def test_the_entrypoint_refuses_before_starting_torchrun(tmp_path: Path) -> None:
    """``python launch.py`` as the image runs it, in a "pod" whose torch sees one GPU (a
    stand-in ``torch`` module first on the path; nothing of the real one is loaded): it exits
    non-zero with the message, and never prints the line it prints before it ``exec``s."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "class cuda:\n    @staticmethod\n    def device_count():\n        return 1\n"
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("PET_", "PYTHON"))},
        "PYTHONPATH": str(tmp_path),
        "PET_NPROC_PER_NODE": "2",
        "PET_NODE_RANK": "0",
    }
    done = subprocess.run(
        [sys.executable, str(LAUNCH_PY), "--epochs", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    assert "PET_NPROC_PER_NODE=2 asks for 2 processes in this pod, but it has 1 GPU " in (
        done.stderr
    ), done.stderr
    assert "torch.distributed.run" not in done.stdout + done.stderr  # nothing was exec'd

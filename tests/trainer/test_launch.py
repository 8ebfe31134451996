"""The trainer image's entrypoint (``docker/trainer/launch.py``): which command a pod runs.

``test_train_ddp.py`` runs it end to end; these check the choice itself for each env a pod can
have (pure: nothing is started).
"""

from __future__ import annotations

import importlib.util
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


@pytest.mark.parametrize("env", [{}, {"PET_NPROC_PER_NODE": "1"}, {"PET_NPROC_PER_NODE": " 1 "}])
def test_one_process_per_pod_runs_train_py_with_the_plugin_env(launch, env) -> None:
    assert launch.launch({"RANK": "1", **env}, ["--epochs", "3"], "py") == (PLAIN, {})


@pytest.mark.parametrize("nproc", ["8", "gpu"])
def test_several_run_under_torchrun_which_reads_the_pet_env(launch, nproc) -> None:
    env = {"PET_NPROC_PER_NODE": nproc, "PET_NODE_RANK": "2", "RANK": "2"}
    assert launch.launch(env, ["--epochs", "3"], "py") == (TORCHRUN, {})


def test_without_hcclrank_the_plugins_rank_is_the_node_rank(launch) -> None:
    """Volcano before v1.12.3: no PET_NODE_RANK; the pod's RANK counts pods, as node ranks do."""
    env = {"PET_NPROC_PER_NODE": "8", "RANK": "3"}
    assert launch.launch(env, ["--epochs", "3"], "py") == (TORCHRUN, {"PET_NODE_RANK": "3"})

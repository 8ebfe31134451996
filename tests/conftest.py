"""Shared test set-up: an isolated Airflow home, and Airflow connections to the local cluster.

Airflow reads its configuration when first imported, so the environment is set here, at
collection time, before any test module imports it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
AIRFLOW_HOME = Path(tempfile.mkdtemp(prefix="avw-airflow-"))
DAGS_FOLDER = AIRFLOW_HOME / "dags"

os.environ["AIRFLOW_HOME"] = str(AIRFLOW_HOME)
os.environ["AIRFLOW__CORE__DAGS_FOLDER"] = str(DAGS_FOLDER)
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
# The DAG processor's 30 s parse limit is about the provider's import (kubernetes_asyncio is
# large) on a loaded 2-core machine, not about the DAGs: CI must not fail on machine noise.
os.environ["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = "180"
os.environ["AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES_REGEXP"] = "airflow_volcano_wandb.*"
# No WANDB_MODE here: the Airflow process's WANDB_MODE is every task's default wandb_mode
# (wandb_run.effective_mode), so a test that wants offline says so.
os.environ.pop("WANDB_MODE", None)
# `dag.test()` and `airflow dags test` run the trigger in their own process: Airflow's
# defer-exit race, which the settle time guards against, needs a scheduler. Stacks with a real
# scheduler (tests/e2e/airflow_stack.py) do not inherit this and keep the default.
os.environ["AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS"] = "0"
# For the same reason, a deferrable task defers at once (no first window in its worker), so
# the deferred path is what the deferrable tests exercise; the window has its own tests.
os.environ["AIRFLOW__VOLCANO_WANDB__DEFER_AFTER"] = "0"
os.environ.pop("AIRFLOW_CONN_KUBERNETES_DEFAULT", None)


def _populate_dags_folder() -> None:
    """The example DAGs (with their templates/) and the tests' own DAGs, in one folder."""
    shutil.copytree(REPO / "dags", DAGS_FOLDER, dirs_exist_ok=True)
    shutil.copytree(REPO / "tests" / "dags", DAGS_FOLDER, dirs_exist_ok=True)


_populate_dags_folder()


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's Airflow home goes with the session (a machine kept hundreds of them);
    the Airflow stacks that tests start keep their logs under test-artifacts/ instead."""
    shutil.rmtree(AIRFLOW_HOME, ignore_errors=True)


@pytest.fixture(scope="session")
def airflow_db() -> Path:
    """A migrated metadata DB (SQLite) in the session's Airflow home."""
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        check=True,
        capture_output=True,
        env=os.environ.copy(),
    )
    return AIRFLOW_HOME


@pytest.fixture
def kubernetes_connection(volcano_cluster, monkeypatch) -> str:
    """Point ``kubernetes_default`` at the local cluster's admin kubeconfig."""
    conn = {
        "conn_type": "kubernetes",
        "extra": {"kube_config_path": str(volcano_cluster.kubeconfig)},
    }
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(conn))
    return "kubernetes_default"


@pytest.fixture
def wandb_connection(monkeypatch) -> str:
    """A W&B connection with a recognisable fake key, to prove it never leaks."""
    conn = {
        "conn_type": "wandb",
        "password": "avw-test-key-0123456789abcdef0123456789abcdef0123",
        "extra": {"entity": "test-entity", "project": "test-project"},
    }
    monkeypatch.setenv("AIRFLOW_CONN_WANDB_DEFAULT", json.dumps(conn))
    return conn["password"]


# Deselected unless ``-m`` names them: ``long`` (the default suite has a time budget in CI,
# ``make test-long``) and ``real_pods`` (they need the cluster's real node, root and
# containerd: ``make test-real-pods``).
OPT_IN_MARKERS = ("long", "real_pods")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests with an opt-in marker only run when ``-m`` names it, or their file is named on the
    command line (``make test-ha`` names its files): they are deselected, not skipped, from
    the default suite."""
    named = config.getoption("markexpr") or ""
    dropped = [marker for marker in OPT_IN_MARKERS if marker not in named]
    files = {Path(arg.split("::")[0]).resolve() for arg in config.args}
    kept = [
        i
        for i in items
        if i.path.resolve() in files or not any(i.get_closest_marker(m) for m in dropped)
    ]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[i for i in items if i not in kept])
        items[:] = kept

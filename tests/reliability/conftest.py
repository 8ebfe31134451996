"""Fixtures shared by the reliability tests."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import pytest
from kubernetes.client import ApiClient

from test_support.airflow_runs import DAGS, running_stack
from test_support.faults import FaultProxy, kubeconfig_for_server
from test_support.operator_tries import kubernetes_conn_env
from tests.e2e.airflow_stack import REPO, AirflowStack


@pytest.fixture
def proxy(volcano_cluster, monkeypatch, tmp_path, wandb_connection):
    """A TCP fault proxy in front of the apiserver; ``kubernetes_default`` goes through it."""
    target = urlparse(volcano_cluster.server)
    with FaultProxy(target.hostname, target.port) as fault_proxy:
        kubeconfig = kubeconfig_for_server(
            volcano_cluster.kubeconfig, fault_proxy.url, tmp_path / "via-proxy.kubeconfig"
        )
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", kubernetes_conn_env(kubeconfig))
        yield fault_proxy


@pytest.fixture
def admin(volcano_cluster) -> Iterator[ApiClient]:
    """The shared cluster's admin API client, closed after the test."""
    with volcano_cluster.api_client() as api:
        yield api


@pytest.fixture(scope="session")
def reliability_airflow(volcano_cluster) -> Iterator[AirflowStack]:
    """One real Airflow for every reliability test that needs a scheduler and triggerer.

    Its DAGs: ``tests/reliability/dags`` and the example ``volcano_pytorch_manual``.
    """
    folder = Path(tempfile.mkdtemp(prefix="avw-rel-dags-"))
    shutil.copytree(DAGS, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dags" / "volcano_pytorch_manual.py", folder)
    shutil.copytree(REPO / "dags" / "templates", folder / "templates")
    try:
        # The manual DAG's allow-list is fixed when Airflow starts: its one namespace first.
        manual = volcano_cluster.create_namespace("rel-manual")
        with running_stack(
            volcano_cluster, "airflow-logs", dags_folder=folder, manual_namespace=manual
        ) as stack:
            yield stack
    finally:
        shutil.rmtree(folder, ignore_errors=True)

"""Fixtures shared by the reliability tests."""

from __future__ import annotations

from urllib.parse import urlparse

import pytest

from airflow_volcano_wandb.testing.faults import FaultProxy, kubeconfig_for_server
from tests.reliability.support import kubernetes_conn_env


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

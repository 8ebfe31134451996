"""The real node's fixture for the trials on real pods."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_volcano_wandb.testing.cluster import cluster as local_cluster
from airflow_volcano_wandb.testing.cluster import placement


@pytest.fixture
def real_node(volcano_cluster, volcano_namespace) -> Path:
    """The host dir the test namespace's pods on the real node see as ``/wandb``; fails on a
    cluster without the node."""
    assert volcano_cluster.real_node, (
        "these tests need the real node: run them with AVW_CLUSTER_REAL_NODE=1 "
        "(make test-real-pods), or on a cluster started with `up --real-node`"
    )
    state_dir = volcano_cluster.state_dir
    server = json.loads((state_dir / "state.json").read_text())["server"]
    kube = local_cluster.admin_client(state_dir, server)
    return placement.wandb_dir(kube, state_dir, volcano_namespace)


@pytest.fixture
def quick_pod_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pods are read every 30 s by default; these trials wait on what the pods show."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "2")

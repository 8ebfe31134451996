"""Fixtures shared by the cluster tests of a wait's verdicts."""

from __future__ import annotations

import pytest


@pytest.fixture
def cluster(airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, monkeypatch):
    """``(admin API client, namespace)`` for tests that run a wait to its verdict in-process.

    A test module may define its own ``cluster``, which wins over this one.
    """
    # The deferred wait's settle time guards Airflow's scheduler, which these tests do not run.
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS", "0")
    # The pods are read every 30 s by default; these tests wait on what the pods show.
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "2")
    return volcano_cluster.api_client(), volcano_namespace

"""Fixtures shared by the cluster tests of a wait's verdicts."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from test_support.wandb_standin import WandbStandin
from tests.integration.test_wandb_hook_standin import API_KEY, ENTITY, PROJECT

#: The ``wandb`` connection the ``wandb_standin`` fixture makes, to the stand-in.
STANDIN_CONN_ID = "wandb_standin"


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


@pytest.fixture
def wandb_standin(monkeypatch) -> Iterator[WandbStandin]:
    """The W&B stand-in, and the ``wandb_standin`` connection to it (its key, in ``ml-team``'s
    ``retraining`` project)."""
    with WandbStandin(api_key=API_KEY) as server:
        connection = {
            "conn_type": "wandb",
            "host": server.url,
            "password": API_KEY,
            "extra": {"entity": ENTITY, "project": PROJECT},
        }
        monkeypatch.setenv(f"AIRFLOW_CONN_{STANDIN_CONN_ID.upper()}", json.dumps(connection))
        monkeypatch.delenv("WANDB_API_KEY", raising=False)  # the connection's key, not ours
        yield server

"""Fixtures shared by the cluster tests of a wait's verdicts, and the W&B stand-in's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from test_support.wandb_standin import WandbStandin
from test_support.wandb_standin_seed import (
    KNOWN_OPERATIONS,
    RUN_ID,
    SUMMARY,
    VARIABLES,
    seed_template,
    templated_seed,
)
from test_support.wandb_support import (
    API_KEY,
    ENTITY,
    PROJECT,
    STANDIN_CONN_ID,
    use_wandb_connection,
)


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
        extra = {"entity": ENTITY, "project": PROJECT}
        use_wandb_connection(monkeypatch, STANDIN_CONN_ID, server.url, extra=extra)
        yield server


@pytest.fixture
def standin() -> Iterator[WandbStandin]:
    """The W&B stand-in seeded as ``test_support/wandb_standin_seed.py`` says; the test fails
    if the SDK sent it an operation it does not know."""
    with WandbStandin(api_key=API_KEY) as server:
        server.add_run(ENTITY, PROJECT, RUN_ID, summary=SUMMARY, config={"lr": 0.01})
        server.add_queue(ENTITY, "volcano-queue", config=seed_template())
        server.add_queue(
            ENTITY, "templated-queue", config=templated_seed(), template_variables=VARIABLES
        )
        server.add_queue(ENTITY, "empty-queue", config=None)
        server.add_queue(ENTITY, "sagemaker-queue", config={"x": 1}, resource="sagemaker")
        yield server
        unsupported = [op for op in server.operations() if op not in KNOWN_OPERATIONS]
        assert not unsupported, f"wandb sent operations the stand-in does not know: {unsupported}"


@pytest.fixture
def conn_id(standin: WandbStandin, monkeypatch: pytest.MonkeyPatch, request) -> str:
    """A ``wandb`` connection to the seeded ``standin``, in ``ml-team``'s ``retraining``."""
    # A distinct id per test: Airflow may cache connections by id within a process.
    name = f"wandb_standin_{request.node.name}".lower()
    name = "".join(c if c.isalnum() else "_" for c in name)
    extra = {"entity": ENTITY, "project": PROJECT}
    return use_wandb_connection(monkeypatch, name, standin.url, extra=extra)

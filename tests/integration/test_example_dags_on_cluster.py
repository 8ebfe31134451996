"""The example DAGs in dags/, run with dag.test() against the local Volcano cluster.

The retraining DAG and the promotion DAG it schedules through its model asset need a real
scheduler: tests/e2e/test_retraining_assets_e2e.py runs them."""

from __future__ import annotations

import pytest

from tests.integration.jobs import list_jobs, run_dag, wait_until

pytestmark = pytest.mark.cluster


def test_manual_dag_submits_and_the_sensor_waits_then_leaves_nothing_behind(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, capfd
):
    api = volcano_cluster.api_client()
    _, tis = run_dag(
        "volcano_pytorch_manual",
        file="volcano_pytorch_manual.py",
        namespace=volcano_namespace,
        worker_replicas=3,
    )
    out = capfd.readouterr()
    assert tis == {"submit": ("success", 1), "wait": ("success", 1)}
    assert "worker 3/3" in out.out + out.err  # the form's replicas, as the wait saw them
    # The sensor owns the cleanup: the completed job (and with it its key Secret) is gone.
    wait_until(lambda: not list_jobs(api, volcano_namespace), 60, what="the job deleted")

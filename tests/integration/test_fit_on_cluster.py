"""Will it fit? The operator's fit check against the local cluster's Volcano queues and its
four simulated nodes of 8 ``nvidia.com/gpu`` each.

A job that can never be placed (more GPUs than its queue's capability; one pod larger than
any node) fails at once with ``JobWontFitError`` and nothing reaches the cluster; a fitting
job runs; the least-privilege ServiceAccount of ``docker/k8s/rbac.yaml`` (a namespaced Role,
which cannot read queues or nodes) gets one log line saying the check was skipped, and the
job runs all the same.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import NotFoundException

from airflow_volcano_wandb.exceptions import JobWontFitError
from test_support.cluster_jobs import SIM_DURATION, custom, list_jobs, seed_template, wait_until
from test_support.operator_tries import StubTaskInstance, execute_operator, operator
from tests.reliability.test_rbac_service_account import as_service_account  # noqa: F401

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

DAG_ID = "avw_fit"
GPU = "nvidia.com/gpu"
SKIPPED = "Fit check: skipped what it could not read"


@pytest.fixture
def cluster(
    airflow_db, wandb_connection, kubernetes_connection, volcano_cluster, volcano_namespace
):
    with volcano_cluster.api_client() as api:
        yield api, volcano_namespace


@pytest.fixture
def capped_queue(volcano_cluster) -> Iterator[str]:
    """A Volcano queue capped at 16 GPUs."""
    name = f"fit-cap-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {"weight": 1, "reclaimable": True, "capability": {GPU: "16"}},
    }
    with volcano_cluster.api_client() as api:
        queues = k8s.CustomObjectsApi(api)
        queues.create_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", body)
        try:
            yield name
        finally:
            queues.delete_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)


def _gpu_job(namespace: str, gpus: int, workers: int, **kwargs):
    """The seed with ``gpus`` per rank and ``workers`` workers; the master ends it in 2 s."""
    return operator(
        namespace=namespace,
        template=seed_template(master={SIM_DURATION: "2"}, worker={SIM_DURATION: "600"}),
        replicas={"worker": workers},
        container_resources={task: {"limits": {GPU: gpus}} for task in ("master", "worker")},
        **kwargs,
    )


def _fit_lines(capfd) -> list[str]:
    """The fit check's lines of the task log (the operator logs through structlog to stdout)."""
    captured = capfd.readouterr()
    lines = (captured.out + captured.err).splitlines()
    return [
        line.split("] ", 1)[1].rsplit(" [airflow.task", 1)[0]
        for line in lines
        if "] Fit check" in line
    ]


def test_a_gang_over_its_queues_capability_fails_at_once_and_nothing_is_submitted_with_a_stub_ti(
    cluster, capped_queue
):
    api, namespace = cluster
    op = _gpu_job(namespace, gpus=8, workers=2, volcano_queue=capped_queue)
    with pytest.raises(JobWontFitError) as refused:
        execute_operator(op, StubTaskInstance(DAG_ID, "train", "over-cap"))
    assert f"needs 24 nvidia.com/gpu in one gang; queue '{capped_queue}' is capped at 16" in str(
        refused.value
    )
    assert list_jobs(api, namespace) == []
    assert k8s.CoreV1Api(api).list_namespaced_secret(namespace).items == []  # no key Secret


def test_a_pod_larger_than_any_node_fails_at_once_with_a_stub_ti(cluster):
    api, namespace = cluster
    op = _gpu_job(namespace, gpus=16, workers=1)
    with pytest.raises(JobWontFitError, match=r"needs 16 nvidia\.com/gpu; the largest node has 8"):
        execute_operator(op, StubTaskInstance(DAG_ID, "train", "too-big"))
    assert list_jobs(api, namespace) == []


def test_a_fitting_job_runs_and_warn_only_logs_with_a_stub_ti(cluster, capped_queue, capfd):
    api, namespace = cluster
    result = execute_operator(
        _gpu_job(namespace, gpus=8, workers=1, volcano_queue=capped_queue),
        StubTaskInstance(DAG_ID, "train", "fits"),
    )
    assert result["phase"] == "Completed"
    assert _fit_lines(capfd) == []  # admin reads both, and 16 GPUs fit the cap of 16
    # warn: the same over-cap gang is logged and submitted (it would pend until
    # pending_timeout: a queue's cap stays a cap).
    op = _gpu_job(namespace, gpus=8, workers=2, volcano_queue=capped_queue, fit_check="warn")
    op.wait_for_completion = False
    execute_operator(op, StubTaskInstance(DAG_ID, "train", "warned"))
    assert any("can never be placed as things stand" in line for line in _fit_lines(capfd))
    # Gone before the queue is: Volcano refuses to delete a queue that holds a PodGroup. The
    # fitting job may still be listed while the operator's own delete of it completes (CI saw
    # the 404): gone is what this asks for.
    for job in list_jobs(api, namespace):
        with contextlib.suppress(NotFoundException):
            custom(api).delete_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["metadata"]["name"]
            )
    wait_until(lambda: not list_jobs(api, namespace), 60, what="the warned job deleted")


def test_the_least_privilege_role_skips_the_check_and_says_so_once_with_a_stub_ti(
    as_service_account,  # noqa: F811
    capfd,
):
    make, _ = as_service_account
    namespace = make()
    result = execute_operator(
        _gpu_job(namespace, gpus=8, workers=1), StubTaskInstance(DAG_ID, "train", "least")
    )
    assert result["phase"] == "Completed"
    assert _fit_lines(capfd) == [
        f"{SKIPPED} (queue 'default': not allowed to this connection; nodes: not allowed to "
        "this connection); grant the optional ClusterRole of docker/k8s/rbac-fit-check.yaml "
        "for it"
    ]

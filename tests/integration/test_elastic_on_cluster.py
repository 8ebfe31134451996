"""Elastic workers (issue 51) on the real Volcano: the operator's rendered elastic job is
admitted by Volcano's webhook, starts with fewer workers than it asks for when only some fit
on the KWOK GPU nodes (4 x 8 ``nvidia.com/gpu``), which the wait reads as running, and a lost
worker's pod is replaced alone."""

from __future__ import annotations

import time

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.wait.judge import JobTarget, judge
from test_support.cluster_jobs import (
    SIM_DURATION,
    get_job,
    job_phase,
    job_pods,
    seed_template,
    wait_until,
)
from test_support.operator_tries import StubTaskInstance, execute_operator, operator

pytestmark = pytest.mark.cluster

#: A whole KWOK node (8 GPUs) per rank: a pod per node at most, and the gang of two fits.
WHOLE_NODE = {"limits": {"nvidia.com/gpu": "8"}}


def _gpu_nodes(api: k8s.ApiClient) -> int:
    """The nodes a whole-node rank fits on (4 KWOK nodes; other tests may add some)."""
    nodes = k8s.CoreV1Api(api).list_node().items
    return sum(int((n.status.allocatable or {}).get("nvidia.com/gpu", "0")) >= 8 for n in nodes)


def _running(pods: list[k8s.V1Pod], task: str) -> dict[str, str]:
    """Pod name -> uid of ``task``'s running pods."""
    return {
        p.metadata.name: p.metadata.uid
        for p in pods
        if p.metadata.labels.get("volcano.sh/task-spec") == task
        and p.status.phase == "Running"
        and p.metadata.deletion_timestamp is None
    }


def test_an_elastic_job_is_admitted_and_starts_on_the_workers_that_fit_with_a_stub_ti(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    namespace, api = volcano_namespace, volcano_cluster.api_client()
    # More workers than there are nodes: two ranks at least cannot be placed.
    most = _gpu_nodes(api) + 1
    op = operator(
        template=seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"}),
        namespace=namespace,
        elastic=(1, most),
        container_resources={"master": WHOLE_NODE, "worker": WHOLE_NODE},
        wait_for_completion=False,
    )
    submitted = execute_operator(op, StubTaskInstance("avw_elastic", "train", "r1"))
    name = submitted["name"]

    # Admitted as rendered: the webhook kept the gang of master + 1 and the worker task's own.
    spec = get_job(api, namespace, name)["spec"]
    assert spec["minAvailable"] == 2
    assert {t["name"]: (t["minAvailable"], t["replicas"]) for t in spec["tasks"]} == {
        "master": (1, 1),
        "worker": (1, most),
    }
    worker_policies = next(t for t in spec["tasks"] if t["name"] == "worker")["policies"]
    assert worker_policies == [{"events": ["PodEvicted", "PodFailed"], "action": "RestartPod"}]

    # Volcano starts it on what fits: Running with the master and fewer workers than asked.
    wait_until(lambda: job_phase(api, namespace, name) == "Running", 120, what="job Running")
    wait_until(
        lambda: (
            _running(job_pods(api, namespace, name), "master")
            and _running(job_pods(api, namespace, name), "worker")
        ),
        120,
        what="the master and a worker running",
    )
    pods = job_pods(api, namespace, name)
    workers = _running(pods, "worker")
    assert 1 <= len(workers) < most, workers
    pending = [p.metadata.name for p in pods if p.status.phase == "Pending"]
    assert len(pending) == most - len(workers), pending
    # The wait reads Volcano's job as running, not as a gang still waiting: an hour past a
    # one-second pending timeout, no verdict.
    target = JobTarget(
        job_name=name, namespace=namespace, job_uid=submitted["uid"], pending_timeout=1
    )
    assert judge(get_job(api, namespace, name), target, time.time() + 3600) is None

    # A running worker lost, three times: its pod alone is replaced, the master and the other
    # workers keep theirs, and the job runs on (Volcano counts each as a retry: at its default
    # maxRetry of 3 the third loss failed the job, so the renderer gives elastic jobs more).
    master = _running(pods, "master")
    for _ in range(3):
        lost = sorted(workers)[0]
        k8s.CoreV1Api(api).delete_namespaced_pod(lost, namespace, grace_period_seconds=0)

        def replaced(lost: str = lost, uid: str = workers[lost]) -> bool:
            now = job_pods(api, namespace, name)
            return lost in {p.metadata.name for p in now if p.metadata.uid != uid}

        wait_until(replaced, 120, what=f"{lost} created again")
        wait_until(lambda: job_phase(api, namespace, name) == "Running", 120, what="Running")
        now = job_pods(api, namespace, name)
        assert _running(now, "master") == master
        kept = {n: u for n, u in _running(now, "worker").items() if n in workers and n != lost}
        assert kept == {n: u for n, u in workers.items() if n != lost}
        wait_until(lambda: _running(job_pods(api, namespace, name), "worker"), 120, what="a worker")
        workers = _running(job_pods(api, namespace, name), "worker")
    status = get_job(api, namespace, name)["status"]
    assert (status["state"]["phase"], status["retryCount"]) == ("Running", 3)
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", name
    )
    api.close()

"""The kube-apiserver is down when the task submits: a clear, bounded failure; the retry is clean.

A private cluster (its apiserver is stopped). ``VolcanoPyTorchJobOperator.execute`` runs the
real submit path against it:

1. apiserver down before the first call: the task fails after bounded retries (seconds, not
   minutes) with an error that says the API server could not be reached and that nothing
   was submitted; once the apiserver is back, the retry submits one job, which completes;
2. apiserver lost between creating the job and creating the W&B key's Secret it names (after
   the job, owned by it): the task fails the same way; no Secret exists yet (the pods wait for
   it), and the retry reattaches and creates it (one Secret, owned by the one job, so it goes
   with the job).
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client, config

from airflow_volcano_wandb.exceptions import ApiserverUnreachableError
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from test_support import faults
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, seed_template

pytestmark = [pytest.mark.long, pytest.mark.cluster, pytest.mark.timeout(600)]

DAG_ID = "avw_rel_down_at_submit"
BOUND = 60.0  # the hook's retries give up within a minute


@pytest.fixture(scope="module")
def cluster():
    with support.private_cluster() as info:
        yield info


def _op(namespace: str, **kwargs):
    template = seed_template(master={SIM_DURATION: "2"})
    return support.operator(
        template=template,
        namespace=namespace,
        replicas={"worker": 0},
        on_finish_action="keep",  # so the test can count the jobs afterwards
        pending_timeout=120,  # a job Volcano never starts fails the test instead of hanging it
        **kwargs,
    )


def _restart_apiserver(info, argv):
    faults.start_component(info.state_dir, "kube-apiserver", argv)
    faults.wait_apiserver_ready(info.state_dir, 90)
    # The retry is tested, not Volcano's recovery: see wait_volcano_runs_jobs.
    faults.wait_volcano_runs_jobs(info.state_dir)


def _fails_unreachable(namespace: str, run_id: str) -> str:
    """Run a try that must fail with ``ApiserverUnreachableError`` within BOUND; its words."""
    started = time.monotonic()
    with pytest.raises(ApiserverUnreachableError) as failure:
        support.execute_operator(_op(namespace), support.StubTaskInstance(DAG_ID, "train", run_id))
    took = time.monotonic() - started
    assert took < BOUND, took
    return str(failure.value)


def test_apiserver_down_before_submit_with_a_stub_ti(cluster, monkeypatch, wandb_connection):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", support.kubernetes_conn_env(cluster.kubeconfig)
    )
    namespace = support.create_namespace(cluster.kubeconfig, "down-submit")
    argv = faults.stop_component(cluster.state_dir, "kube-apiserver")
    try:
        message = _fails_unreachable(namespace, "r1")
    finally:
        _restart_apiserver(cluster, argv)
    assert "could not reach the Kubernetes API" in message, message
    assert cluster.server in message, message

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    assert support.list_jobs(api, namespace) == []  # nothing half-created
    selector = TaskInstanceIdentity(DAG_ID, "train", "r1").selector()
    secrets = client.CoreV1Api(api).list_namespaced_secret(namespace, label_selector=selector)
    assert secrets.items == []

    retry = support.StubTaskInstance(DAG_ID, "train", "r1", try_number=2)
    result = support.execute_operator(_op(namespace), retry)
    assert result["phase"] == "Completed"
    jobs = support.list_jobs(api, namespace)
    assert [j["metadata"]["uid"] for j in jobs] == [result["uid"]]
    api.close()


def test_apiserver_lost_between_job_and_secret_with_a_stub_ti(
    cluster, monkeypatch, wandb_connection
):
    monkeypatch.setenv(
        "AIRFLOW_CONN_KUBERNETES_DEFAULT", support.kubernetes_conn_env(cluster.kubeconfig)
    )
    namespace = support.create_namespace(cluster.kubeconfig, "down-between")
    stopped: list[list[str]] = []
    real_create = VolcanoHook.create_job

    def create_then_lose_apiserver(self, body, ns):
        created = real_create(self, body, ns)
        stopped.append(faults.stop_component(cluster.state_dir, "kube-apiserver"))
        return created

    monkeypatch.setattr(VolcanoHook, "create_job", create_then_lose_apiserver)
    try:
        message = _fails_unreachable(namespace, "r2")
    finally:
        monkeypatch.setattr(VolcanoHook, "create_job", real_create)
        if stopped:
            _restart_apiserver(cluster, stopped[0])
    assert stopped, "the fault was not injected"
    assert "could not reach the Kubernetes API" in message

    api = config.new_client_from_config(config_file=str(cluster.kubeconfig))
    core = client.CoreV1Api(api)
    identity = TaskInstanceIdentity(DAG_ID, "train", "r2")
    (job,) = support.list_jobs(api, namespace)  # left for the retry: its outcome is not reported
    # Its key Secret comes after the job: not created yet (the pods wait for it).
    assert core.list_namespaced_secret(namespace, label_selector=identity.selector()).items == []

    # Not waited out: a job created the moment the apiserver went away may stay Pending for
    # good (Volcano 1.14's job controller misses a PodGroup created during its outage), which
    # is Volcano's, not the point here.
    retry = _op(namespace, wait_for_completion=False)
    result = support.execute_operator(
        retry, support.StubTaskInstance(DAG_ID, "train", "r2", try_number=2)
    )
    assert result["uid"] == job["metadata"]["uid"]  # reattached, and given its key
    assert [j["metadata"]["uid"] for j in support.list_jobs(api, namespace)] == [result["uid"]]
    secrets = core.list_namespaced_secret(namespace, label_selector=identity.selector()).items
    assert len(secrets) == 1
    assert [o.uid for o in secrets[0].metadata.owner_references or []] == [result["uid"]]
    api.close()

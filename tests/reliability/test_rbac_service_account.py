"""The provider as the least-privilege ServiceAccount of ``docker/k8s/rbac.yaml``, for real.

``rbac.yaml`` is applied to a fresh namespace; a token for its ServiceAccount is issued with
the TokenRequest API and written into a kubeconfig (no client certificate, no impersonation:
the API server authenticates the token and RBAC authorizes every call). Airflow's
``kubernetes_default`` connection points at that kubeconfig, and the test DAGs run through
``dag.test()``:

- sync and deferrable runs succeed (create the job and then its key Secret, list, watch,
  stream the master's log, delete); with Secrets ``create`` only, a retry reattaches and the
  key Secret goes with its deleted job; a key Secret name taken first withdraws the job;
- a failing job's report (pods, exit code, log tail, PodGroups, events) works too: no 403
  hides the cause;
- with a Role that lacks one permission the task fails with an error naming the verb and the
  resource that is missing, and nothing is left running.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import yaml
from kubernetes import client

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.exceptions import ApiserverUnreachableError
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from airflow_volcano_wandb.job import api_key_secret
from airflow_volcano_wandb.job.ownership import MANAGED_BY, MANAGED_BY_LABEL
from airflow_volcano_wandb.wait import job_watcher, namespace_watch
from test_support import operator_tries as support
from test_support.cluster_jobs import (
    SIM_DURATION,
    failing_template,
    list_jobs,
    run_dag,
    seed_template,
    wait_until,
)
from test_support.rbac_manifests import RBAC, SA, apply_rbac, token_kubeconfig

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]

JOBS = "jobs.batch.volcano.sh"


@pytest.fixture
def as_service_account(airflow_db, wandb_connection, volcano_cluster, monkeypatch, tmp_path):
    """Make ``kubernetes_default`` the ServiceAccount of a fresh namespace; returns a factory."""
    admin = volcano_cluster.api_client()
    created = []

    def make(drop: tuple[str, str] | None = None) -> str:
        namespace = volcano_cluster.create_namespace("rbac-sa")
        created.append(namespace)
        apply_rbac(admin, namespace, drop)
        kubeconfig = token_kubeconfig(
            admin, volcano_cluster.kubeconfig, namespace, tmp_path / f"{namespace}.kubeconfig"
        )
        conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", json.dumps(conn))
        return namespace

    yield make, admin
    for namespace in created:
        volcano_cluster.delete_namespace(namespace)
    admin.close()


def _out(capfd) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err


def test_the_dags_run_as_the_least_privilege_service_account(as_service_account, capfd):
    make, _ = as_service_account
    namespace = make()
    template = seed_template(master={SIM_DURATION: "3"}, worker={SIM_DURATION: "600"})
    for dag_id in ("avw_test_sync", "avw_test_deferrable"):
        _, tis = run_dag(dag_id, template=template, namespace=namespace)
        out = _out(capfd)
        assert tis["train"][0] == "success", out[-5000:]
        assert "Forbidden" not in out and "Kubernetes denied" not in out, out[-5000:]
        assert "[sim] container master exited with code 0" in out  # pods/log was readable

    _, tis = run_dag("avw_test_deferrable", template=failing_template("1"), namespace=namespace)
    out = _out(capfd)
    assert tis["train"][0] == "failed"
    assert "exited with code 3" in out, out[-5000:]
    assert "Kubernetes denied" not in out, out[-5000:]


@pytest.mark.parametrize(
    ("dag_id", "drop", "named"),
    [
        ("avw_test_sync", ("jobs", "create"), f"Kubernetes denied 'create' on '{JOBS}'"),
        ("avw_test_sync", ("secrets", "create"), "Kubernetes denied 'create' on 'secrets'"),
        ("avw_test_sync", ("jobs", "list"), f"Kubernetes denied 'list' on '{JOBS}'"),
        # A Role without "watch" is no longer fatal to the shared watcher (a 403 may be a
        # RoleBinding not yet propagated): see test_a_missing_watch_permission_is_reported.
    ],
)
def test_a_missing_permission_names_the_verb_and_resource(
    as_service_account, capfd, dag_id, drop, named
):
    make, admin = as_service_account
    namespace = make(drop=drop)
    template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    started = time.monotonic()
    _, tis = run_dag(dag_id, template=template, namespace=namespace)
    out = _out(capfd)
    assert tis["train"][0] == "failed"
    assert time.monotonic() - started < 120  # no endless wait
    assert f"{named} in namespace '{namespace}'" in out, out[-5000:]
    # Nothing submitted, or nothing left running; and no Secret left holding the W&B key.
    wait_until(lambda: list_jobs(admin, namespace) == [], 60, what="no job left")
    wait_until(lambda: _key_secrets(admin, namespace) == [], 60, what="no key Secret left")


def test_a_missing_watch_permission_is_reported_and_retried(as_service_account, monkeypatch):
    """The watcher keeps retrying a refused watch and says which permission is missing.

    Whether and when to give up is the trigger's call, on ``failing_since``.
    """
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_MAX", 1.0)
    make, _ = as_service_account
    namespace = make(drop=("jobs", "watch"))

    async def watch_a_while() -> tuple[float | None, str, int]:
        watcher = job_watcher.NamespaceJobWatcher(
            lambda: AsyncVolcanoHook(conn_id="kubernetes_default"), namespace
        )
        watcher.subscribe("any")
        try:
            await asyncio.sleep(8)
            return watcher.failing_since, watcher.last_failure, watcher.connects
        finally:
            await watcher.stop()

    failing_since, last_failure, connects = asyncio.run(watch_a_while())
    assert failing_since is not None
    assert f"Kubernetes denied 'watch' on '{JOBS}' in namespace '{namespace}'" in last_failure
    assert connects >= 3  # retried, each time over a fresh client


def _key_secrets(admin, namespace: str) -> list[str]:
    secrets = client.CoreV1Api(admin).list_namespaced_secret(
        namespace, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}"
    )
    return [s.metadata.name for s in secrets.items]


def _deferred_try(namespace: str, run_id: str, master_seconds: str):
    """A deferred try (operator, task instance, trigger) whose wait gives a lost watch 6 s, on
    a job whose master runs ``master_seconds``."""
    op = support.operator(
        template=seed_template(master={SIM_DURATION: master_seconds}, worker={SIM_DURATION: "600"}),
        namespace=namespace,
        deferrable=True,
        watch_failure_grace=6,
        poll_interval=2,
    )
    ti = support.StubTaskInstance("avw_rel_rbac", "train", run_id)
    return op, ti, support.execute_operator(op, ti)


def test_a_watch_refused_for_good_falls_back_to_reading_the_job_with_a_stub_ti(
    as_service_account, monkeypatch
):
    """The apiserver still answers GETs: the wait reads the job directly past the grace and
    ends with the job's own outcome instead of failing as a lost watch."""
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_MAX", 1.0)
    make, _ = as_service_account
    namespace = make(drop=("jobs", "watch"))
    op, ti, trigger = _deferred_try(namespace, "watch-refused", master_seconds="15")
    (event,) = asyncio.run(support.collect_events(trigger, timeout=120))
    assert event["outcome"] == "succeeded", event
    assert op.execute_complete(support.context_for(ti), event)["uid"] == trigger.job_uid


def test_nothing_readable_past_the_grace_fails_the_task_and_leaves_the_job_with_a_stub_ti(
    as_service_account,
):
    make, admin = as_service_account
    namespace = make()
    op, ti, trigger = _deferred_try(namespace, "nothing-readable", master_seconds="600")
    client.RbacAuthorizationV1Api(admin).delete_namespaced_role_binding(SA, namespace)
    (event,) = asyncio.run(support.collect_events(trigger, timeout=120))
    assert event["outcome"] == "watch_lost", event
    with pytest.raises(ApiserverUnreachableError) as failure:
        op.execute_complete(support.context_for(ti), event)
    message = str(failure.value)
    assert "Kubernetes denied" in message, message
    assert "left untouched" in message and "reattaches" in message
    (job,) = list_jobs(admin, namespace)  # never destroyed on a guess
    assert job["metadata"]["uid"] == trigger.job_uid
    assert not job["metadata"].get("deletionTimestamp")


@pytest.mark.long  # 1 minute: make test-long, not CI
def test_waiting_jobs_outlive_a_role_binding_removed_for_30_seconds_with_a_stub_ti(
    as_service_account, monkeypatch
):
    """A RoleBinding re-applied by Helm or Argo CD: 403s for a while, then all is well."""
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_MAX", 2.0)
    make, admin = as_service_account
    namespace = make()
    rbac = client.RbacAuthorizationV1Api(admin)
    binding = rbac.read_namespaced_role_binding(SA, namespace)
    binding.metadata = client.V1ObjectMeta(name=SA, namespace=namespace)
    template = seed_template(master={SIM_DURATION: "45"}, worker={SIM_DURATION: "600"})
    runs = []
    for index in range(5):
        op = support.operator(template=template, namespace=namespace, deferrable=True)
        ti = support.StubTaskInstance("avw_rel_rbac", "train", f"rebind-{index}")
        runs.append((op, ti, support.execute_operator(op, ti)))

    async def main() -> list[list[dict]]:
        waits = [asyncio.create_task(support.collect_events(t, timeout=240)) for _, _, t in runs]
        await asyncio.sleep(3)
        await asyncio.to_thread(rbac.delete_namespaced_role_binding, SA, namespace)
        await asyncio.sleep(30)
        await asyncio.to_thread(rbac.create_namespaced_role_binding, namespace, binding)
        return await asyncio.gather(*waits)

    results = asyncio.run(main())
    assert [[e["outcome"] for e in events] for events in results] == [["succeeded"]] * 5
    for (op, ti, trigger), (event,) in zip(runs, results, strict=True):
        assert op.execute_complete(support.context_for(ti), event)["uid"] == trigger.job_uid


def test_with_secrets_create_only_a_job_is_submitted_reattached_and_keyed_with_a_stub_ti(
    as_service_account,
):
    """rbac.yaml grants Secrets ``create`` and nothing else (reading one back, or patching
    it, would read every key of the namespace); that is all a submission, a retry that
    reattaches and the end of the job take. The key Secret is the job's: immutable, owned by
    it from its creation, and collected by Kubernetes when the job is deleted."""
    [rule] = [
        r
        for doc in yaml.safe_load_all(RBAC.read_text())
        if doc and doc["kind"] == "Role"
        for r in doc["rules"]
        if "secrets" in r["resources"]
    ]
    assert rule["verbs"] == ["create"]
    make, admin = as_service_account
    namespace = make()
    template = seed_template(master={SIM_DURATION: "6"}, worker={SIM_DURATION: "600"})
    first = support.StubTaskInstance("avw_rel_rbac", "train", "create-only")
    trigger = support.execute_operator(
        support.operator(template=template, namespace=namespace, deferrable=True), first
    )
    [secret] = (
        client.CoreV1Api(admin)
        .list_namespaced_secret(namespace, label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY}")
        .items
    )
    assert secret.immutable is True
    assert [(o.kind, o.uid) for o in secret.metadata.owner_references] == [("Job", trigger.job_uid)]

    # The next try (the first one's worker lost) reattaches and waits the job out in process;
    # on success the job is deleted, and the garbage collector takes its Secret.
    retry = support.StubTaskInstance("avw_rel_rbac", "train", "create-only", try_number=2)
    result = support.execute_operator(
        support.operator(template=template, namespace=namespace, on_finish_action="delete"), retry
    )
    assert result["uid"] == trigger.job_uid and result["phase"] == "Completed"
    wait_until(lambda: list_jobs(admin, namespace) == [], 60, what="the job deleted")
    wait_until(lambda: _key_secrets(admin, namespace) == [], 60, what="its Secret collected")


def test_a_new_jobs_secret_name_taken_first_withdraws_the_job_with_a_stub_ti(
    as_service_account, monkeypatch
):
    """Someone who can read the job's spec and create Secrets races us to its key Secret's
    name with a key of their own: the pods would log into their W&B account. The job is
    withdrawn and the try fails naming the Secret; nothing keeps running."""
    make, admin = as_service_account
    namespace = make()
    real_create = VolcanoHook.create_job
    planted = []

    def create_then_race(self, body, ns):
        job = real_create(self, body, ns)
        ref = api_key_secret.named_by(job)
        client.CoreV1Api(admin).create_namespaced_secret(
            ns, {"metadata": {"name": ref.name}, "stringData": {ref.key: "the racers-key"}}
        )
        planted.append(ref.name)
        return job

    monkeypatch.setattr(VolcanoHook, "create_job", create_then_race)
    template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    ti = support.StubTaskInstance("avw_rel_rbac", "train", "raced")
    with pytest.raises(AirflowException) as failure:
        support.execute_operator(
            support.operator(template=template, namespace=namespace, deferrable=True), ti
        )
    assert planted, "the race was not run"
    message = str(failure.value)
    assert f"{namespace}/{planted[0]} was created by someone else first" in message, message
    assert "the job was withdrawn" in message
    wait_until(lambda: list_jobs(admin, namespace) == [], 60, what="the job withdrawn")
    pods = client.CoreV1Api(admin).list_namespaced_pod(namespace).items
    assert [p.metadata.name for p in pods if not p.metadata.deletion_timestamp] == []

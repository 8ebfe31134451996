"""The W&B key never leaks, and the Roles grant exactly what the provider uses.

One real Airflow 3 (API server, scheduler, DAG processor, triggerer, LocalExecutor), logging at
DEBUG (which turns on the Kubernetes client's own DEBUG log of every response body), runs as
the least-privilege ServiceAccounts on a local cluster whose kube-apiserver writes an audit
log (Metadata level). The W&B connection holds a marked key, unique to this run:

- ``avw_security_managed_key`` (``rbac.yaml``'s account): deferrable success and failure, a
  failure seen by a deferrable sensor, and a job whose cleared task reattaches; its pods print
  the key into their logs, which Airflow shows in the task logs;
- ``avw_security_external_key`` (``rbac-external-key-secret.yaml``'s account, the DAG's own
  Secret through ``wandb_api_key_secret``): the same flows;
- ``volcano_pytorch_manual`` as the trigger form runs it: submit, then the deferrable sensor.

The pods print the key in each form a log may carry it: plain, base64, and the ``Basic``
credentials the W&B client sends. Then the key is searched for, in all three forms, in every
file Airflow wrote (task logs, the triggerer's trigger logs, component logs, the metadata DB
dumped as SQL with its XComs and rendered template fields), in every Volcano job (status
included), pod and ConfigMap the runs' namespaces held (as last seen), in the key Secrets'
metadata and in the namespaces' events: 0 hits. The same search finds it where it belongs
(positive controls): in the data of the key's Secrets, and in a pod's log read from
Kubernetes directly.

A finished job's key Secret goes with the job: the Secrets of the jobs deleted after success
are gone, deleted by Kubernetes' garbage collector (the audit log says so), and every key
Secret left is owned by a job that still exists.

The audit log gives the (resource, verb) set each account used; it must equal its Role in the
manifest, both ways, and the doctor's list.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from airflow_volcano_wandb.cli import permissions
from airflow_volcano_wandb.cli.permissions import Permission
from airflow_volcano_wandb.testing import cluster as local_cluster
from airflow_volcano_wandb.testing.pytest_plugin import STATE_DIR_ENV, VolcanoCluster
from airflow_volcano_wandb.testing.recorder import Recorder
from test_support.rbac_manifests import role_permissions
from test_support.security_audit import (
    Audited,
    collected_by_the_garbage_collector,
    config_maps,
    end_followed_job,
    followed_log_text,
    job_uids,
    key_hits,
    key_secrets_named,
    orphaned_key_secrets,
    run_finished,
    service_account,
    task_states,
    trigger_and_wait,
    try_number,
    used_permissions,
)
from test_support.wandb_standin import WandbStandin
from tests.e2e.airflow_stack import REPO, AirflowStack, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.e2e, pytest.mark.timeout(1800)]

MANAGED, EXTERNAL = "avw_security_managed_key", "avw_security_external_key"
MANUAL = "volcano_pytorch_manual"
ARTIFACTS = REPO / "test-artifacts" / "security"
#: What the pods print (tests/dags/avw_security.py), as every task log must show it.
PRINTED_MASKED = (
    "[sim] env WANDB_API_KEY=***",
    "[sim] env WANDB_API_KEY in base64: ***",
    "[sim] http send: Authorization: Basic ***",
)


@pytest.fixture(scope="module")
def audited_cluster(request: pytest.FixtureRequest) -> Iterator[VolcanoCluster]:
    """A cluster whose apiserver writes an audit log: the session's when it has one (started
    with ``AVW_CLUSTER_AUDIT_LOG=1``, or a reused one started with ``--audit-log``), else one
    of this module's own."""

    if os.environ.get(local_cluster.AUDIT_LOG_ENV) or os.environ.get(STATE_DIR_ENV):
        session: VolcanoCluster = request.getfixturevalue("volcano_cluster")
        if session.audit_log:
            yield session
            return
    state_dir = Path(tempfile.mkdtemp(prefix="avw-audit-cluster-"))
    info = local_cluster.up(state_dir, nodes=2, audit_log=True)
    try:
        yield VolcanoCluster.from_info(info, owned=True)
    finally:
        local_cluster.down(state_dir)
        shutil.rmtree(state_dir, ignore_errors=True)


@pytest.fixture(scope="module")
def audited(audited_cluster: VolcanoCluster) -> Iterator[Audited]:
    key = "avwleak" + secrets.token_hex(20)
    home = Path(tempfile.mkdtemp(prefix="avw-security-airflow-"))
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    dags = home / "dags"
    shutil.copytree(REPO / "dags", dags)
    shutil.copy(REPO / "tests" / "dags" / "avw_security.py", dags)
    admin = audited_cluster.api_client()
    managed_ns, managed_kubeconfig = service_account(
        audited_cluster, admin, "rbac.yaml", home / "managed.kubeconfig"
    )
    external_ns, external_kubeconfig = service_account(
        audited_cluster, admin, "rbac-external-key-secret.yaml", home / "external.kubeconfig"
    )
    # The external-key DAG's own Secret, made by an admin: the key never passes through Airflow.
    client.CoreV1Api(admin).create_namespaced_secret(
        external_ns,
        {"metadata": {"name": "wandb-api-key"}, "stringData": {"api-key": key}},
    )
    # W&B itself is out of reach here: the summary reads and the link-back go to a stand-in.
    standin = WandbStandin(api_key=key, any_run_summary={"loss": 0.1}).start()
    stack = AirflowStack(
        home=home / "airflow",
        log_dir=ARTIFACTS / "logs",
        kubeconfig=managed_kubeconfig,
        wandb_conn={"conn_type": "wandb", "host": standin.url, "password": key},
        dags_folder=dags,
        extra_env={
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "DEBUG",
            # The test DAGs import the cluster harness's constants: slow on a busy machine.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
            "AIRFLOW_CONN_KUBERNETES_EXTERNAL": json.dumps(
                {
                    "conn_type": "kubernetes",
                    "extra": {"kube_config_path": str(external_kubeconfig)},
                }
            ),
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES": managed_ns,
        },
    )
    recorders = {
        f"{kind} in {ns}": make(admin, ns)
        for ns in (managed_ns, external_ns)
        for kind, make in (
            ("jobs", Recorder.jobs),
            ("pods", Recorder.pods),
            ("configmaps", config_maps),
        )
    }
    try:
        stack.start(timeout=900)
        runs = {
            MANAGED: trigger_and_wait(stack, MANAGED, {"namespace": managed_ns}),
            EXTERNAL: trigger_and_wait(stack, EXTERNAL, {"namespace": external_ns}),
            MANUAL: trigger_and_wait(stack, MANUAL, {"namespace": managed_ns}),
        }
        # The followed master prints the key as it starts: its job ends once the triggerer's
        # follow has shown each masked form, not after its full 60 s.
        end_followed_job(stack, admin, managed_ns, (MANAGED, runs[MANAGED]), PRINTED_MASKED)
        for dag_id, run_id in runs.items():
            wait_for(
                lambda d=dag_id, r=run_id: run_finished(stack, d, r), 600, f"{dag_id} to finish"
            )
        # A new try of the task whose job still runs: it reattaches (its Secret was delivered).
        stack.clear(MANAGED, runs[MANAGED], ["hold"])
        wait_for(
            lambda: try_number(stack, MANAGED, runs[MANAGED], "hold") >= 2,
            600,
            "the cleared hold task to succeed again",
        )
        states = {dag_id: task_states(stack, dag_id, run_id) for dag_id, run_id in runs.items()}
        hold_pod = next(
            p
            for p in client.CoreV1Api(admin).list_namespaced_pod(managed_ns).items
            if p.metadata.labels.get("volcano.sh/task-spec") == "master"
            and p.status.phase == "Running"
        )
        admin_pod_log = client.CoreV1Api(admin).read_namespaced_pod_log(
            hold_pod.metadata.name, managed_ns
        )
        task_logs = sorted((ARTIFACTS / "logs" / "tasks").rglob("*"))
        task_log_text = "\n".join(p.read_text(errors="replace") for p in task_logs if p.is_file())
        followed = followed_log_text(stack.log_dir)
        # The metadata DB as text (its XComs, rendered fields, connections), searched below.
        stack.postgres.dump(home / "metadata.sql")
    finally:
        stack.stop()
        standin.stop()
        for recorder in recorders.values():
            recorder.stop()
    objects: dict[str, Any] = {}
    for what, recorder in recorders.items():
        for name, obj in recorder.objects.items():
            objects[f"{what}: {name}"] = admin.sanitize_for_serialization(obj)
    core = client.CoreV1Api(admin)
    for ns in (managed_ns, external_ns):
        wait_for(
            lambda n=ns: not orphaned_key_secrets(admin, n),
            120,
            f"the garbage collector to delete the key Secrets of {ns}'s deleted jobs",
        )
    live_jobs = {ns: job_uids(admin, ns) for ns in (managed_ns, external_ns)}
    for ns in (managed_ns, external_ns):
        for event in core.list_namespaced_event(ns).items:
            objects[f"event in {ns}: {event.metadata.name}"] = admin.sanitize_for_serialization(
                event
            )
    key_secrets = [
        admin.sanitize_for_serialization(s)
        for ns in (managed_ns, external_ns)
        for s in core.list_namespaced_secret(ns).items
        if s.type == "Opaque"
    ]
    # Who holds a key Secret, and what it says about itself, must not hold the key.
    for secret in key_secrets:
        objects[f"secret metadata: {secret['metadata']['name']}"] = secret["metadata"]
    # What W&B would store from the link-back must not hold the key either.
    for i, upsert in enumerate(standin.upserts):
        objects[f"W&B run write {i}"] = upsert
    files = [p for root in (home, ARTIFACTS) for p in root.rglob("*") if p.is_file()]
    yield Audited(
        key=key,
        namespaces={"rbac.yaml": managed_ns, "rbac-external-key-secret.yaml": external_ns},
        audit_log=audited_cluster.audit_log,
        files=files,
        objects=objects,
        secrets=key_secrets,
        admin_pod_log=admin_pod_log,
        task_log_text=task_log_text,
        followed_log_text=followed,
        wandb_upserts=list(standin.upserts),
        runs=runs,
        live_jobs=live_jobs,
        states=states,
    )
    for ns in (managed_ns, external_ns):
        audited_cluster.delete_namespace(ns)
    admin.close()
    shutil.rmtree(home, ignore_errors=True)


def test_the_flows_ran_as_intended_on_the_standin(audited: Audited) -> None:
    """Every path the search relies on was taken (a search of nothing finds nothing)."""
    for dag_id in (MANAGED, EXTERNAL):
        states = audited.states[dag_id]
        expected = {"succeed": "success", "fail": "failed", "submit": "success"}
        assert {k: states[k] for k in expected} == expected, states
        assert states["sense"] == "failed", states
    assert audited.states[MANUAL] == {"submit": "success", "wait": "success"}
    assert audited.states[MANAGED]["hold"] == "success"
    assert audited.states[MANAGED]["follow"] == "success"
    text = audited.task_log_text
    # DEBUG was on, the client's own included: it logged the API's response bodies.
    assert "response body" in text
    # The pods' printed key, in each form, reached the task logs (success tail, failure
    # reports), masked, and so did the triggerer's live follow of the master log, which never
    # holds the key.
    for line in PRINTED_MASKED:
        assert text.count(line) >= 3, (line, text[-3000:])
        assert line in audited.followed_log_text, line
    assert "reattach" in text.lower()
    # The link-back wrote each online run's Airflow task into W&B (here, the stand-in).
    assert any("airflow" in json.dumps(u.get("config", "")) for u in audited.wandb_upserts)
    # The metadata DB was searched as text, XComs and rendered fields included.
    [dump] = [p.read_text(errors="replace") for p in audited.files if p.name == "metadata.sql"]
    assert "COPY public.xcom " in dump and "COPY public.rendered_task_instance_fields " in dump


def test_the_key_is_nowhere_airflow_or_the_jobs_put_it_on_the_standin(
    audited: Audited,
) -> None:
    hits = {}
    for path in audited.files:
        found = key_hits(audited.key, path.read_bytes().decode("latin-1"))
        if found:
            hits[str(path)] = found
    for what, obj in audited.objects.items():
        found = key_hits(audited.key, json.dumps(obj))
        if found:
            hits[what] = found
    assert hits == {}
    assert len(audited.files) > 20 and len(audited.objects) > 20  # there was a lot to search


def test_the_search_finds_the_key_where_it_belongs_on_the_standin(
    audited: Audited,
) -> None:
    """Positive controls: the same search, on the Secrets' data and a pod's own log."""
    holding = [
        s["metadata"]["name"] for s in audited.secrets if key_hits(audited.key, json.dumps(s))
    ]
    assert "wandb-api-key" in holding  # the external-key DAG's own Secret
    assert any(name.startswith("avw-wandb-key-") for name in holding)  # the operator's
    for secret in audited.secrets:
        if secret["metadata"]["name"] in holding:
            assert key_hits(audited.key, json.dumps(secret["data"])) == ["base64"]
    assert key_hits(audited.key, audited.admin_pod_log) == ["plain", "base64", "basic"]


def test_the_key_is_in_no_config_map_annotation_event_message_or_job_status_on_the_standin(
    audited: Audited,
) -> None:
    """The places a key could be written by mistake, named: each was searched and is clean."""
    searched: dict[str, list[str]] = {
        "config map": [],
        "annotation": [],
        "event message": [],
        "job status": [],
    }
    for what, obj in audited.objects.items():
        if what.startswith("configmaps in "):
            searched["config map"].append(json.dumps(obj))
        if what.startswith("event in "):
            searched["event message"].append(str(obj.get("message")))
        if what.startswith("jobs in "):
            searched["job status"].append(json.dumps(obj.get("status")))
        if what.startswith(("jobs in ", "pods in ", "configmaps in ")):
            searched["annotation"].append(json.dumps(obj["metadata"].get("annotations")))
        if what.startswith("secret metadata: "):
            searched["annotation"].append(json.dumps(obj.get("annotations")))
    for place, texts in searched.items():
        assert texts, f"no {place} was searched"
        assert not [t for t in texts if key_hits(audited.key, t)], place


def test_a_finished_jobs_key_secret_is_gone_with_the_job_on_the_standin(
    audited: Audited,
) -> None:
    """Deleted after success, the job takes its key Secret along (its owner reference); a
    kept job, failed or still running, keeps its own."""
    namespace = audited.namespaces["rbac.yaml"]
    left = {s["metadata"]["name"]: s for s in audited.secrets}
    collected = collected_by_the_garbage_collector(audited.audit_log, namespace)
    for task in ("succeed", "follow"):
        [name] = key_secrets_named(audited, namespace, task)
        assert name not in left, task
        assert name in collected, task  # it existed, and went with its job
    for task in ("fail", "hold"):
        [name] = key_secrets_named(audited, namespace, task)
        owners = {ref["uid"] for ref in left[name]["metadata"]["ownerReferences"]}
        assert owners & audited.live_jobs[namespace], task
        assert left[name]["immutable"] is True, task
    for secret in left.values():
        if secret["metadata"]["name"].startswith("avw-wandb-key-"):
            owners = {ref["uid"] for ref in secret["metadata"]["ownerReferences"]}
            assert owners & audited.live_jobs[namespace], secret["metadata"]["name"]


@pytest.mark.parametrize(
    ("manifest", "doctors_list"),
    [
        ("rbac.yaml", permissions.REQUIRED_PERMISSIONS),
        ("rbac-external-key-secret.yaml", permissions.EXTERNAL_KEY_SECRET_PERMISSIONS),
    ],
)
def test_each_role_grants_exactly_what_its_account_used_on_the_standin(
    audited: Audited, manifest: str, doctors_list: tuple[Permission, ...]
) -> None:
    used, denied = used_permissions(audited.audit_log, audited.namespaces[manifest])
    # Only the fit check's optional cluster-wide reads may be refused: a namespaced Role cannot
    # grant them, and the task then says once that it skipped the check (docs/security.md).
    refused = denied - set(permissions.FIT_CHECK_PERMISSIONS)
    assert refused == set(), f"refused to the provider: {sorted(map(str, refused))}"
    granted = role_permissions(manifest)
    assert sorted(map(str, used - granted)) == [], "used but not granted"
    assert sorted(map(str, granted - used)) == [], "granted but never used"
    assert set(doctors_list) == used

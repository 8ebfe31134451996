"""The security audit's search and bookkeeping (``tests/cluster/test_security_audit.py``): what
the runs left behind, the key in the forms a log may carry it, the runs' ServiceAccounts, and
what the apiserver's audit log says each account did."""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubernetes import client

from airflow_volcano_wandb.cli.permissions import Permission
from airflow_volcano_wandb.job.api_key_secret import named_by
from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR, TASK_ID_LABEL
from airflow_volcano_wandb.testing.pytest_plugin import VolcanoCluster
from airflow_volcano_wandb.testing.recorder import Recorder
from test_support.cluster_jobs import end_master
from test_support.rbac_manifests import K8S, SA, apply_rbac, token_kubeconfig
from tests.e2e.airflow_stack import AirflowStack, wait_for

#: A task instance's states once its try has ended.
ENDED = ("success", "failed", "upstream_failed", "skipped", "up_for_retry")


@dataclass
class Audited:
    """What the runs left behind, for the tests below to search and compare."""

    key: str
    namespaces: dict[str, str]  # role manifest -> namespace
    audit_log: Path
    files: list[Path]
    objects: dict[str, Any]  # what -> a Kubernetes object as JSON
    secrets: list[dict[str, Any]]
    admin_pod_log: str
    task_log_text: str
    followed_log_text: str  # the triggerer's log of the task that follows the master's log
    wandb_upserts: list[dict[str, Any]]  # what the provider wrote into W&B (the link-back)
    runs: dict[str, str]  # DAG id -> its run's id
    live_jobs: dict[str, set[str]]  # namespace -> uids of the jobs left at the end
    states: dict[str, dict[str, str]] = field(default_factory=dict)


def key_forms_written_out(key: str) -> dict[str, str]:
    """The key as a log may carry it (written out here, not taken from ``key_forms``, so that
    a form the product forgets is still searched for)."""
    return {
        "plain": key,
        "base64": base64.b64encode(key.encode()).decode(),
        "basic": base64.b64encode(f"api:{key}".encode()).decode(),
    }


def key_hits(key: str, text: str) -> list[str]:
    return [form for form, value in key_forms_written_out(key).items() if value in text]


def service_account(
    cluster: VolcanoCluster, admin: client.ApiClient, manifest: str, out: Path
) -> tuple[str, Path]:
    namespace = cluster.create_namespace(f"sec-{Path(manifest).stem}")
    apply_rbac(admin, namespace, manifest=K8S / manifest)
    return namespace, token_kubeconfig(admin, cluster.kubeconfig, namespace, out)


def config_maps(admin: client.ApiClient, namespace: str) -> Recorder:
    return Recorder(client.CoreV1Api(admin).list_namespaced_config_map, namespace)


def job_uids(admin: client.ApiClient, namespace: str) -> set[str]:
    jobs = client.CustomObjectsApi(admin).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs"
    )
    return {job["metadata"]["uid"] for job in jobs["items"]}


def orphaned_key_secrets(admin: client.ApiClient, namespace: str) -> list[str]:
    """Key Secrets none of whose owner jobs exists any more (the garbage collector's to do)."""
    live = job_uids(admin, namespace)
    secrets_ = client.CoreV1Api(admin).list_namespaced_secret(
        namespace, label_selector=MANAGED_SELECTOR
    )
    return [
        s.metadata.name
        for s in secrets_.items
        if not {ref.uid for ref in s.metadata.owner_references or []} & live
    ]


def followed_log_text(log_dir: Path, task_id: str = "follow") -> str:
    """The trigger logs of ``task_id``, which follows the master's log from the triggerer."""
    return "\n".join(
        path.read_text(errors="replace")
        for path in sorted((log_dir / "tasks").rglob("*"))
        if f"task_id={task_id}" in str(path) and ".trigger." in path.name and path.is_file()
    )


def end_followed_job(
    stack: AirflowStack,
    admin: client.ApiClient,
    namespace: str,
    run: tuple[str, str],
    printed: tuple[str, ...],
) -> None:
    """Once the triggerer's follow of the ``follow`` task's master log (``run``: its DAG and
    run id, its job in ``namespace``) shows each of ``printed``, which the master prints as it
    starts, end that master: the job runs no longer than the audit needs. Nothing is ended if
    the task ended first, at its job's own duration."""

    def follow_state() -> str | None:
        return task_states(stack, *run).get("follow")

    def shown_or_ended() -> bool:
        stack.check_alive()
        text = followed_log_text(stack.log_dir)
        return all(line in text for line in printed) or follow_state() in ENDED

    wait_for(shown_or_ended, 600, "the triggerer to follow the master's printed lines")
    if follow_state() in ENDED:
        return
    jobs = client.CustomObjectsApi(admin).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs"
    )["items"]
    [name] = [
        job["metadata"]["name"]
        for job in jobs
        if (job["metadata"].get("labels") or {}).get(TASK_ID_LABEL) == "follow"
    ]
    end_master(admin, namespace, job=name)


def trigger_and_wait(stack: AirflowStack, dag_id: str, conf: dict[str, Any]) -> str:
    wait_for(lambda: stack.api("GET", f"/dags/{dag_id}"), 600, f"DAG {dag_id} parsed")
    stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    run_id = f"sec-{uuid.uuid4().hex[:8]}"
    stack.trigger(dag_id, run_id, conf)
    return run_id


def run_finished(stack: AirflowStack, dag_id: str, run_id: str) -> dict[str, Any] | None:
    stack.check_alive()
    run = stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
    return run if run["state"] in ("success", "failed") else None


def task_states(stack: AirflowStack, dag_id: str, run_id: str) -> dict[str, str]:
    answer = stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
    return {ti["task_id"]: ti["state"] for ti in answer["task_instances"]}


def try_number(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> int:
    ti = stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
    return ti["try_number"] if ti["state"] == "success" else 0


def key_secrets_named(audited: Audited, namespace: str, task: str) -> set[str]:
    """The key Secrets the recorded jobs of ``task`` (in the managed-key DAG) name: one per
    job, named when it was rendered."""
    names = set()
    for what, job in audited.objects.items():
        labels = job.get("metadata", {}).get("labels") or {}
        if what.startswith(f"jobs in {namespace}: ") and labels.get(TASK_ID_LABEL) == task:
            ref = named_by(job)
            if ref is not None:
                names.add(ref.name)
    return names


def collected_by_the_garbage_collector(audit_log: Path, namespace: str) -> set[str]:
    """Names of the Secrets of ``namespace`` that Kubernetes' garbage collector deleted."""
    names = set()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef") or {}
        if (
            event["verb"] == "delete"
            and ref.get("resource") == "secrets"
            and ref.get("namespace") == namespace
            and "garbage-collector" in event.get("userAgent", "")
            and (event.get("responseStatus") or {}).get("code") == 200
        ):
            names.add(ref["name"])
    return names


def used_permissions(audit_log: Path, namespace: str) -> tuple[set[Permission], set[Permission]]:
    """(allowed, denied) requests of the ServiceAccount of ``namespace``, from the audit log."""
    user = f"system:serviceaccount:{namespace}:{SA}"
    used, denied = set(), set()
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        ref = event.get("objectRef")
        # A request refused authentication is audited with no username: nobody's.
        if event["user"].get("username") != user or not ref or "resource" not in ref:
            continue
        permission = Permission(
            ref.get("apiGroup", ""), ref["resource"], event["verb"], ref.get("subresource", "")
        )
        code = (event.get("responseStatus") or {}).get("code")
        (denied if code == 403 else used).add(permission)
    return used, denied

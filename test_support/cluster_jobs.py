"""Helpers for integration tests: run a test DAG, and look at what reached the cluster."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from test_support.jobs import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    with_pod_annotations,
)
from test_support.jobs import load_dag as load_dag_file

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"
SIM_DURATION = DURATION_ANNOTATION
SIM_EXIT_CODE = EXIT_CODE_ANNOTATION


def seed_template(**task_annotations: dict[str, str]) -> dict[str, Any]:
    """The seed template, with pod annotations per task (to simulate run time or failure)."""
    return with_pod_annotations(yaml.safe_load(SEED.read_text()), **task_annotations)


def failing_template(after: str, exit_code: str = "3") -> dict[str, Any]:
    """The seed, whose master exits ``exit_code`` after ``after`` seconds and ends the job.

    The seed's ``restartPolicy: OnFailure`` would restart the container in place and keep the
    job Running; ``Never`` plus ``PodFailed -> TerminateJob`` makes the failure the job's.
    """
    template = seed_template(
        master={SIM_DURATION: after, SIM_EXIT_CODE: exit_code}, worker={SIM_DURATION: "600"}
    )
    for task in template["spec"]["tasks"]:
        task["template"]["spec"]["restartPolicy"] = "Never"
    template["spec"]["policies"] = [{"event": "PodFailed", "action": "TerminateJob"}]
    return template


def load_dag(dag_id: str, file: str = "avw_test_jobs.py"):
    """Import a DAG from the session's DAGs folder (dag.test() needs it to be there)."""
    import os

    return load_dag_file(Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / file, dag_id)


def run_dag(dag_id: str, file: str = "avw_test_jobs.py", **conf: Any):
    """Run the DAG once with ``dag.test()``; return the DagRun and its task instances."""
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    dag_run = load_dag(dag_id, file).test(run_conf=conf)
    with create_session() as session:
        tis = {
            ti.task_id: (ti.state, ti.try_number)
            for ti in session.query(TaskInstance).filter_by(dag_id=dag_id, run_id=dag_run.run_id)
        }
    return dag_run, tis


def run_retry_policy_dag(tmp_path: Path, **conf: Any) -> tuple[Any, dict, list[dict]]:
    """Run ``avw_test_retry_policy`` once: the DagRun, its task instances, and the failure
    each of its tries recorded (class, reason, exit code), in order."""
    record = tmp_path / "failures.jsonl"
    dag_run, tis = run_dag("avw_test_retry_policy", record_to=str(record), **conf)
    return dag_run, tis, [json.loads(line) for line in record.read_text().splitlines()]


def xcoms(dag_id: str, run_id: str) -> dict[str, Any]:
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(XComModel).filter_by(dag_id=dag_id, run_id=run_id).all()
        return {f"{row.task_id}.{row.key}": row.value for row in rows}


def custom(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


def list_jobs(api: k8s.ApiClient, namespace: str) -> list[dict]:
    return custom(api).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs"
    )["items"]


def submit_job(
    api: k8s.ApiClient,
    namespace: str,
    name: str,
    master_seconds: int,
    labels: dict[str, str] | None = None,
    master_annotations: dict[str, str] | None = None,
    pod_labels: dict[str, str] | None = None,
) -> dict:
    """Create the seed's job directly (no operator), its master running ``master_seconds``
    (and simulated as ``master_annotations`` say), its pods labelled with ``pod_labels``."""
    master = {SIM_DURATION: str(master_seconds), **(master_annotations or {})}
    job = seed_template(master=master, worker={SIM_DURATION: "600"})
    job["metadata"].update(name=name, namespace=namespace, labels=labels or {})
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["containers"][0]["image"] = "example.org/trainer:1"
        task["template"].setdefault("metadata", {}).setdefault("labels", {}).update(
            pod_labels or {}
        )
    return custom(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", job
    )


def end_master(api: k8s.ApiClient, namespace: str, job: str | None = None) -> None:
    """End the namespace's master pods now (or only job ``job``'s): their simulated run is cut
    to 1 s, which KWOK applies at once, so a test ends a long job exactly when it wants (its
    exit code stays)."""
    core = k8s.CoreV1Api(api)
    selector = "volcano.sh/task-spec=master" + (f",volcano.sh/job-name={job}" if job else "")
    pods = core.list_namespaced_pod(namespace, label_selector=selector).items
    assert pods, f"no master pod to end in {namespace}"
    for pod in pods:
        core.patch_namespaced_pod(
            pod.metadata.name, namespace, {"metadata": {"annotations": {SIM_DURATION: "1"}}}
        )


def create_job(api: k8s.ApiClient, job: dict[str, Any]) -> dict[str, Any]:
    """Create the Volcano job in the namespace its metadata names; what the apiserver made."""
    namespace = job["metadata"]["namespace"]
    return custom(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", job
    )


def get_job(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return custom(api).get_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", name
    )


def job_phase(api: k8s.ApiClient, namespace: str, name: str) -> str:
    return get_job(api, namespace, name).get("status", {}).get("state", {}).get("phase", "")


def job_pods(api: k8s.ApiClient, namespace: str, name: str) -> list[k8s.V1Pod]:
    selector = f"volcano.sh/job-name={name}"
    return k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items


def podgroups(api: k8s.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return custom(api).list_namespaced_custom_object(
        "scheduling.volcano.sh", "v1beta1", namespace, "podgroups"
    )["items"]


def seed_job(namespace: str, **pod_annotations: str) -> dict[str, Any]:
    """The W&B Launch seed template with its macros filled in by plain string replacement, as a
    job of ``namespace`` whose every pod has ``pod_annotations``."""
    run_id = uuid.uuid4().hex[:8]
    text = SEED.read_text()
    for macro, value in {
        "image_uri": "registry.invalid/ddp-mlp:test",
        "run_id": run_id,
        "run_name": f"run-{run_id}",
        "entity_name": "test-entity",
        "project_name": "test-project",
        "author": "tester",
    }.items():
        text = text.replace("${" + macro + "}", value)
    job = yaml.safe_load(text)
    job["metadata"]["namespace"] = namespace
    for task in job["spec"]["tasks"]:
        meta = task["template"].setdefault("metadata", {})
        meta.setdefault("annotations", {}).update(pod_annotations)
    return job


def simple_job(namespace: str, name: str, replicas: int = 1, **overrides: Any) -> dict[str, Any]:
    """A one-task Volcano job (``main``); ``annotations``, ``restart_policy`` and ``resources``
    go to its pods, other ``overrides`` to its spec."""
    pod: dict[str, Any] = {
        "metadata": {"annotations": overrides.pop("annotations", {})},
        "spec": {
            "restartPolicy": overrides.pop("restart_policy", "Never"),
            "containers": [
                {
                    "name": "main",
                    "image": "registry.invalid/trainer:test",
                    "resources": overrides.pop("resources", {}),
                }
            ],
        },
    }
    spec = {
        "schedulerName": "volcano",
        "tasks": [{"name": "main", "replicas": replicas, "template": pod}],
    }
    spec.update(overrides)
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def list_pods(api: k8s.ApiClient, namespace: str) -> list[k8s.V1Pod]:
    return k8s.CoreV1Api(api).list_namespaced_pod(namespace).items


def wait_until(predicate, timeout: float = 60, interval: float = 0.5, what: str = "condition"):
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {value!r:.500})")


def start_dag_process(dag_id: str, log_path: Path, logical_date: str, **conf: Any):
    """Run ``airflow dags test`` in a child process, so a test can kill it like a worker dies."""
    import json
    import os
    import subprocess
    import sys

    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "airflow",
            "dags",
            "test",
            dag_id,
            logical_date,
            "-c",
            json.dumps(conf),
        ],
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        env=os.environ.copy(),
        start_new_session=True,
    )


def job_uids(api: k8s.ApiClient, namespace: str) -> list[str]:
    return [job["metadata"]["uid"] for job in list_jobs(api, namespace)]


def rerun_task(dag_id: str, task_id: str, run_id: str):
    """Run one task instance of an existing DAG run again, as a retry or a new worker would."""
    import os
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-m", "airflow", "tasks", "test", dag_id, task_id, run_id],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ.copy(),
        timeout=600,
    )


def start_task_process(dag_id: str, task_id: str, run_id: str, log_path: Path):
    """``rerun_task`` in a child process that is not waited on, so a test can act on the
    cluster while the task runs (its output goes to ``log_path``)."""
    import os
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-m", "airflow", "tasks", "test", dag_id, task_id, run_id],
        stdout=log_path.open("w"),
        stderr=subprocess.STDOUT,
        env=os.environ.copy(),
        start_new_session=True,
    )


@dataclass
class DeferredTaskInstance:
    """What a triggerer gives a trigger as its ``task_instance`` (the state query's keys)."""

    dag_id: str = "avw_test"
    task_id: str = "wait"
    run_id: str = "run"
    map_index: int = -1


def as_in_a_triggerer(trigger: Any, monkeypatch: Any, *, task_left: bool | None) -> Any:
    """``trigger`` as a triggerer runs it, with Airflow answering that its task has ``task_left``
    ``deferred`` (``True``: a user's kill; ``False``: a handover; ``None``: no answer).

    The answer is stubbed: ``RuntimeTaskInstance.get_task_states`` needs a running triggerer's
    supervisor (the real one is used by tests/reliability/test_deferred_kill.py).
    """
    from airflow_volcano_wandb import airflow_compat

    async def task_left_deferral(ti: Any) -> bool | None:
        return task_left

    trigger.task_instance = DeferredTaskInstance()
    monkeypatch.setattr(airflow_compat, "task_left_deferral", task_left_deferral)
    return trigger

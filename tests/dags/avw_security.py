"""DAGs for the key-leak search and the RBAC audit (tests/cluster/test_security_audit.py).

Two DAGs, one per Role:

- ``avw_security_managed_key``: the operator writes the key's Secret (``rbac.yaml``). Every
  pod prints its ``WANDB_API_KEY`` (a trainer that dumps its environment), plain, in base64
  and as the ``Basic`` credentials the W&B client sends (``testing/cluster/podlogs.py``), so
  wherever Airflow shows a pod's log the key would appear unless every form is masked;
- ``avw_security_external_key``: the DAG names a Secret of its own (``wandb_api_key_secret``,
  ``rbac-external-key-secret.yaml``) through the ``kubernetes_external`` connection. Airflow
  never holds that key, so it could not mask it: these pods do not print it.

Each runs a deferrable success, a deferrable failure and a failure seen by a deferrable
sensor; the first also holds a long job (``hold``) that a cleared try reattaches to.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.testing.cluster.podlogs import PRINT_ENV_ANNOTATION

# The repo's test support, importable by the Airflow components that parse this file from a
# copied DAG folder: the project venv has the checkout on sys.path (scripts/bootstrap-venv.sh).
from test_support.jobs import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    with_pod_annotations,
)


def _task(name: str, restart: str, **extra: Any) -> dict[str, Any]:
    container = {"name": name, "image": "${image_uri}"}
    spec = {"containers": [container], "restartPolicy": restart}
    return {"name": name, "replicas": 1, "template": {"spec": spec}, **extra}


def _seed() -> dict[str, Any]:
    """The seed's shape (dags/templates/), inline: this file is also parsed from tests/dags."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "wandb-job-${run_id}"},
        "spec": {
            "minAvailable": 1,
            "schedulerName": "volcano",
            "plugins": {"pytorch": ["--master=master", "--worker=worker", "--port=23456"]},
            "tasks": [
                _task(
                    "master",
                    "OnFailure",
                    policies=[{"event": "TaskCompleted", "action": "CompleteJob"}],
                ),
                _task("worker", "OnFailure"),
            ],
        },
    }


def _template(seconds: int, exit_code: int = 0, print_key: bool = True) -> dict[str, Any]:
    prints = {PRINT_ENV_ANNOTATION: "WANDB_API_KEY"} if print_key else {}
    template = with_pod_annotations(
        _seed(),
        master={**prints, DURATION_ANNOTATION: str(seconds), EXIT_CODE_ANNOTATION: str(exit_code)},
        worker={**prints, DURATION_ANNOTATION: "600"},
    )
    if exit_code:  # the failure is the job's: no restart in place, the job terminates
        for task in template["spec"]["tasks"]:
            task["template"]["spec"]["restartPolicy"] = "Never"
        template["spec"]["policies"] = [{"event": "PodFailed", "action": "TerminateJob"}]
    return template


def _operator(task_id: str, template: dict[str, Any], **kwargs: Any) -> VolcanoPyTorchJobOperator:
    return VolcanoPyTorchJobOperator(
        task_id=task_id,
        template=template,
        namespace="{{ params.namespace }}",
        image_uri="example.org/avw/trainer:test",
        wandb_entity="test-entity",
        wandb_project="test-project",
        wandb_mode="online",  # the key is needed: it must reach the pods, and only them
        poll_interval=1,
        **kwargs,
    )


def _flows(print_key: bool, **connection: Any) -> None:
    # Long enough that its trigger finds the job running and watches it: a job that ended
    # before the trigger's first list is never watched, and the RBAC test derives the role
    # from what this run used (a loaded CI machine started triggers after 3 s jobs had ended).
    _operator("succeed", _template(20, print_key=print_key), deferrable=True, **connection)
    failing = _template(2, exit_code=3, print_key=print_key)
    _operator("fail", failing, deferrable=True, **connection)
    submit = _operator("submit", failing, wait_for_completion=False, **connection)
    sense = VolcanoJobSensor(
        task_id="sense",
        job_name="{{ ti.xcom_pull(task_ids='submit', key='volcano_job')['name'] }}",
        job_uid="{{ ti.xcom_pull(task_ids='submit', key='volcano_job')['uid'] }}",
        namespace="{{ params.namespace }}",
        kubernetes_conn_id=connection.get("kubernetes_conn_id", "kubernetes_default"),
        deferrable=True,
        poke_interval=1,
    )
    submit >> sense


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params={"namespace": "default"},
        default_args={"retries": 0},
    )


with _dag("avw_security_managed_key") as managed_key_dag:
    _flows(print_key=True)
    # The triggerer follows the master's log (it prints the key): long enough to be followed
    # even by a loaded triggerer (one started its trigger's first read 28 s late, after a 20 s
    # job had ended, and the followed log showed nothing to search).
    _operator("follow", _template(60), deferrable=True, follow_master_log=True)
    # Runs for ten minutes; the test clears it, and the next try reattaches to the job and
    # refreshes the key's Secret (create refused, read its metadata, patch).
    _operator("hold", _template(600), wait_for_completion=False)

with _dag("avw_security_external_key") as external_key_dag:
    _flows(
        print_key=False,
        kubernetes_conn_id="kubernetes_external",
        wandb_api_key_secret=("wandb-api-key", "api-key"),
    )

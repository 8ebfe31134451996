"""DAGs the integration tests run with ``dag.test(run_conf=...)``.

Everything that varies between tests (the template, namespace, replicas, simulated exit
codes) comes in through params, so each test says exactly what it runs.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor

PARAMS = {
    "template": {},
    "namespace": "default",
    "replicas": {},
    "pod_annotations": {},
    "job_name": None,
}


def _operator(**kwargs) -> VolcanoPyTorchJobOperator:
    return VolcanoPyTorchJobOperator(
        task_id="train",
        template="{{ params.template }}",
        namespace="{{ params.namespace }}",
        replicas="{{ params.replicas }}",
        pod_annotations="{{ params.pod_annotations }}",
        job_name="{{ params.job_name }}",
        image_uri="example.org/avw/trainer:test",
        wandb_entity="test-entity",
        wandb_project="test-project",
        wandb_mode="offline",
        poll_interval=1,
        **kwargs,
    )


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        render_template_as_native_obj=True,
        params=dict(PARAMS),
    )


with _dag("avw_test_sync") as sync_dag:
    _operator(deferrable=False)

with _dag("avw_test_deferrable") as deferrable_dag:
    _operator(deferrable=True)

with _dag("avw_test_pending_sync") as pending_sync_dag:
    _operator(deferrable=False, pending_timeout=8)

with _dag("avw_test_pending_deferrable") as pending_deferrable_dag:
    _operator(deferrable=True, pending_timeout=8)

with _dag("avw_test_keep") as keep_dag:
    _operator(deferrable=False, on_finish_action="keep")

with _dag("avw_test_submit_then_sense") as submit_then_sense_dag:
    submit = _operator(wait_for_completion=False)
    sense = VolcanoJobSensor(
        task_id="wait",
        job_name="{{ ti.xcom_pull(task_ids='train', key='volcano_job')['name'] }}",
        namespace="{{ params.namespace }}",
        poke_interval=1,
        deferrable=False,
    )
    submit >> sense

"""The DAG of tests/reliability/test_progress_airflow.py: a training's progress in the task logs
of the two waits, each deferred to the real triggerer.

``train`` is the deferred operator waiting on its own job; ``submit`` only submits, and the
sensor ``wait`` waits on that job. Both jobs' W&B runs are online, on the stand-in the test
starts, through the connection it defines (``wandb_progress``, with a key). The template and
namespace come in through the run's conf, like ``tests/dags/avw_test_jobs.py``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor

#: The W&B run each wait reads its progress from: the stack's own Airflow is offline
#: (``WANDB_MODE``), so each task says online.
ONLINE = {
    "wandb_conn_id": "wandb_progress",
    "wandb_entity": "ml-team",
    "wandb_project": "retraining",
    "wandb_mode": "online",
    "wandb_summary_keys": ["eval/accuracy"],
}
JOB = {
    "template": "{{ params.template }}",
    "namespace": "{{ params.namespace }}",
    "image_uri": "example.org/avw/trainer:test",
    "retries": 0,
}

with DAG(
    dag_id="avw_rel_progress",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    render_template_as_native_obj=True,
    params={"template": {}, "namespace": "default"},
):
    VolcanoPyTorchJobOperator(task_id="train", deferrable=True, **JOB, **ONLINE)
    submitted = "ti.xcom_pull(task_ids='submit', key='volcano_job')"
    (
        VolcanoPyTorchJobOperator(task_id="submit", wait_for_completion=False, **JOB, **ONLINE)
        >> VolcanoJobSensor(
            task_id="wait",
            job_name=f"{{{{ {submitted}['name'] }}}}",
            job_uid=f"{{{{ {submitted}['uid'] }}}}",
            namespace="{{ params.namespace }}",
            deferrable=True,
            retries=0,
            **ONLINE,
        )
    )

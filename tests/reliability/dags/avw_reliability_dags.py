"""DAGs for the reliability tests that need a real scheduler and triggerer, the 3-point sweep
of tests/reliability/test_sweep_kill_clear.py among them.

The template and namespace come in through the run's conf, like ``tests/dags/avw_test_jobs.py``.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.wandb import sweep

PARAMS = {"template": {}, "namespace": "default"}


def _dag(dag_id: str, **kwargs) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        render_template_as_native_obj=True,
        params=dict(PARAMS),
        **kwargs,
    )


#: Every DAG's ``train`` task: the simulated trainer, offline, deferred, never retried.
TRAIN = {
    "task_id": "train",
    "template": "{{ params.template }}",
    "namespace": "{{ params.namespace }}",
    "image_uri": "example.org/avw/trainer:test",
    "wandb_entity": "test-entity",
    "wandb_project": "test-project",
    "wandb_mode": "offline",
    "deferrable": True,
    "retries": 0,
}
SWEEP = {"method": "grid", "parameters": {"lr": {"values": [0.01, 0.05, 0.1]}}}


def _operator(**kwargs) -> VolcanoPyTorchJobOperator:
    return VolcanoPyTorchJobOperator(**TRAIN, poll_interval=2, **kwargs)


with _dag("avw_rel_deferred"):
    _operator()

# No first window: a short job ends while its trigger waits out the settle (the race's moment).
with _dag("avw_rel_defer_at_once"):
    _operator(defer_after=0)

# 100 s: the task defers 20 to 60 s into the run (a loaded machine), and the run times out
# about when the execution timeout below fires (test_deferred_kill.py waits for both).
with _dag("avw_rel_dagrun_timeout", dagrun_timeout=timedelta(seconds=100)):
    _operator()

with _dag("avw_rel_execution_timeout"):
    _operator(execution_timeout=timedelta(seconds=90))

# Cleared after success (and while deferred): the finished job stays, so a test can tell a
# new job from a reused one.
with _dag("avw_rel_keep") as keep_dag:  # a module name: load_dag() finds it
    _operator(on_finish_action="keep")

# The sweep the kill and clear tests map over, per index (test_sweep_kill_clear.py).
with _dag("avw_rel_sweep"):
    VolcanoPyTorchJobOperator.partial(
        **TRAIN, wandb_group="sweep/{{ run_id }}", max_active_tis_per_dagrun=3
    ).expand_kwargs(sweep.expand_kwargs(sweep.points(SWEEP)))

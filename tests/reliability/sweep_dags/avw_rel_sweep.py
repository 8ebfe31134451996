"""A 3-point sweep for the kill and clear tests on a real scheduler (tests/reliability/
test_sweep_kill_clear.py). The template and namespace come in through the run's conf."""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.wandb import sweep

SWEEP = {"method": "grid", "parameters": {"lr": {"values": [0.01, 0.05, 0.1]}}}

with DAG(
    dag_id="avw_rel_sweep",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    render_template_as_native_obj=True,
    params={"template": {}, "namespace": "default"},
):
    VolcanoPyTorchJobOperator.partial(
        task_id="train",
        template="{{ params.template }}",
        namespace="{{ params.namespace }}",
        image_uri="example.org/avw/trainer:test",
        wandb_entity="test-entity",
        wandb_project="test-project",
        wandb_mode="offline",
        wandb_group="sweep/{{ run_id }}",
        deferrable=True,
        retries=0,
        max_active_tis_per_dagrun=3,
    ).expand_kwargs(sweep.expand_kwargs(sweep.points(SWEEP)))

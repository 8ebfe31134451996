"""A hyperparameter sweep: one Volcano job per point, one W&B group, the best run promoted.

``SWEEP`` is a W&B sweep configuration (``grid`` or ``random``). ``train`` is mapped over its
points: each map index is a Volcano job and a W&B run of its own (its hyperparameters reach
the trainer as ``TRAIN_*`` env, which the example trainer writes into the run's config with
the map index), all runs in the W&B group ``sweep/<name>/<dag run>``, and in the W&B sweep
``wandb_sweep_id`` when one is given. ``publish_best`` reads every run's summary metric (the
``wandb_summary`` XCom), chooses by the sweep's ``metric``, and updates the model asset with
the winner, as a retraining does: ``volcano_pytorch_promote`` (scheduled on that asset)
promotes it only when it beats the model promoted so far, kept in the asset's state store.
No run with the metric: the task is skipped and no asset event is emitted.

``MAX_PARALLEL`` map indexes train at once (``max_active_tis_per_dagrun``): set it to what
the Volcano queue can run at once (its ``capability`` over one job's gang), or the extra
jobs only wait Pending in the queue while their tasks sit deferred.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Asset, Param, get_current_context, task

from airflow_volcano_wandb.airflow_compat import AirflowSkipException
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.wandb import sweep

# The retraining DAG's model: volcano_pytorch_promote, scheduled on it, decides what is promoted.
MODEL = Asset("volcano_pytorch_model")
MAX_PARALLEL = 3
# A pinned tag: with the seed's imagePullPolicy IfNotPresent a node keeps the ":latest" it
# pulled first, so the points of one sweep could train different code.
IMAGE = "ghcr.io/example/volcano-ddp-mlp:1.0.0"
SWEEP = {
    "name": "mlp-lr-hidden",
    "method": "grid",
    "metric": {"name": "eval/accuracy", "goal": "maximize"},
    "parameters": {
        "lr": {"values": [0.01, 0.05, 0.1]},
        "hidden_size": {"values": [32, 64]},
        "epochs": {"value": 3},
    },
}
POINTS = sweep.points(SWEEP)
METRIC = sweep.metric_of(SWEEP)

with DAG(
    dag_id="volcano_pytorch_sweep",
    description="Grid search on Volcano, grouped in W&B, the best run offered for promotion",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    params={
        "namespace": Param(
            "wandb", type="string", pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", maxLength=63
        ),
        "wandb_entity": Param("airflow", type="string", minLength=1, maxLength=128),
        "wandb_project": Param("volcano-ddp", type="string", minLength=1, maxLength=128),
        "wandb_sweep_id": Param(
            "",
            type="string",
            pattern="^[A-Za-z0-9_-]*$",
            description="A W&B sweep id (from `wandb sweep`) to show the runs in; empty: none",
        ),
    },
    tags=["volcano", "pytorch", "wandb", "sweep"],
) as dag:
    train = VolcanoPyTorchJobOperator.partial(
        task_id="train",
        template="templates/volcano-pytorch-queue-template.yaml",
        image_uri=IMAGE,
        allowed_images=["ghcr.io/example/*"],
        replicas={"worker": 1},
        namespace="{{ params.namespace }}",
        wandb_entity="{{ params.wandb_entity }}",
        wandb_project="{{ params.wandb_project }}",
        wandb_group=f"sweep/{SWEEP['name']}/{{{{ run_id }}}}",
        wandb_sweep_id="{{ params.wandb_sweep_id }}",
        wandb_summary_keys=[METRIC.name],
        deferrable=True,
        pending_timeout=1800,
        retries=1,
        # Each point's try, its wait for a place in the queue included (pending_timeout).
        execution_timeout=timedelta(hours=2),
        max_active_tis_per_dagrun=MAX_PARALLEL,
    ).expand_kwargs(sweep.expand_kwargs(POINTS, to="run_config"))

    # all_done: a point that failed is passed over, it does not stop the others' promotion.
    @task(trigger_rule="all_done", outlets=[MODEL])
    def publish_best() -> dict:
        context = get_current_context()
        ti = context["ti"]
        # One pull per map index keeps each summary next to its point and run, whatever map
        # indexes failed.
        runs = [
            {
                "map_index": i,
                "hyperparameters": point,
                "wandb_run_id": ti.xcom_pull(task_ids="train", key="wandb_run_id", map_indexes=i),
                "wandb_run_url": ti.xcom_pull(task_ids="train", key="wandb_run_url", map_indexes=i),
                "wandb_summary": ti.xcom_pull(task_ids="train", key="wandb_summary", map_indexes=i),
            }
            for i, point in enumerate(POINTS)
        ]
        for run in runs:
            print(f"[{run['map_index']}] {run['hyperparameters']} -> {run['wandb_summary']}")
        chosen = sweep.best([run["wandb_summary"] for run in runs], METRIC)
        if chosen is None:
            raise AirflowSkipException(f"No run has {METRIC.name}: the model asset is unchanged")
        winner = {**runs[chosen], "image": IMAGE, "sweep": SWEEP["name"]}
        print(f"Best by {METRIC.name} ({METRIC.goal}): {winner}")
        # The keys of the operator's own asset extra (docs/assets.md), plus the sweep point.
        context["outlet_events"][MODEL].extra.update(winner)
        return winner

    train >> publish_best()

"""A hyperparameter sweep: one Volcano job per point, one W&B group, the best run promoted.

``SWEEP`` is a W&B sweep configuration (``grid`` or ``random``). ``train`` is mapped over its
points: each map index is a Volcano job and a W&B run of its own (its hyperparameters reach
the trainer as ``TRAIN_*`` env, which the example trainer writes into the run's config with
the map index), all runs in the W&B group ``sweep/<name>/<dag run>``, and in the W&B sweep
``wandb_sweep_id`` when one is given. ``pick`` reads every run's summary metric (the
``wandb_summary`` XCom) and chooses by the sweep's ``metric``; ``promote`` records it the
way ``volcano_pytorch_retraining`` does, only when it beats the promoted value.

``MAX_PARALLEL`` map indexes train at once (``max_active_tis_per_dagrun``): set it to what
the Volcano queue can run at once (its ``capability`` over one job's gang), or the extra
jobs only wait Pending in the queue while their tasks sit deferred.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, Variable, get_current_context, task

from airflow_volcano_wandb import sweep
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

BEST_ACCURACY_VARIABLE = "volcano_pytorch_best_accuracy"  # shared with the retraining DAG
MAX_PARALLEL = 3
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
    description="Grid search on Volcano, grouped in W&B, the best run promoted",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["volcano", "pytorch", "wandb", "sweep"],
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
) as dag:
    train = VolcanoPyTorchJobOperator.partial(
        task_id="train",
        template="templates/volcano-pytorch-queue-template.yaml",
        image_uri="ghcr.io/example/volcano-ddp-mlp:latest",
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
        max_active_tis_per_dagrun=MAX_PARALLEL,
    ).expand_kwargs(sweep.expand_kwargs(POINTS))

    # all_done: a point that failed is passed over, it does not stop the others' promotion.
    @task(trigger_rule="all_done")
    def pick() -> dict | None:
        ti = get_current_context()["ti"]
        # One pull per map index keeps each summary next to its point and run id, whatever
        # map indexes failed.
        runs = [
            {
                "map_index": i,
                "hyperparameters": point,
                "wandb_run_id": ti.xcom_pull(task_ids="train", key="wandb_run_id", map_indexes=i),
                "summary": ti.xcom_pull(task_ids="train", key="wandb_summary", map_indexes=i),
            }
            for i, point in enumerate(POINTS)
        ]
        for run in runs:
            print(f"[{run['map_index']}] {run['hyperparameters']} -> {run['summary']}")
        chosen = sweep.best([run["summary"] for run in runs], METRIC)
        if chosen is None:
            print(f"No run has {METRIC.name}; nothing to promote")
            return None
        winner = {**runs[chosen], "value": float(runs[chosen]["summary"][METRIC.name])}
        print(f"Best by {METRIC.name} ({METRIC.goal}): {winner}")
        return winner

    @task.branch
    def decide(winner: dict | None) -> str:
        best = float(Variable.get(BEST_ACCURACY_VARIABLE, default="-inf"))
        if winner is None or winner["value"] <= best:
            print(f"The sweep's best does not beat the promoted {best}; not promoting")
            return "keep_current"
        return "promote"

    @task
    def promote(winner: dict) -> dict:
        Variable.set(BEST_ACCURACY_VARIABLE, str(winner["value"]))
        print(f"Promoted W&B run {winner['wandb_run_id']} with {METRIC.name}={winner['value']}")
        return winner

    @task
    def keep_current() -> None:
        print("Keeping the current model")

    winner = pick()
    train >> winner
    decide(winner) >> [promote(winner), keep_current()]

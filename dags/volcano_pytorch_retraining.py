"""Weekly retraining: train on Volcano, read the W&B metric, promote only on improvement.

The last promoted accuracy is kept in the Airflow Variable ``volcano_pytorch_best_accuracy``.
A run without the metric (W&B offline, say) is never promoted.

The training step retries by cause (Airflow 3.3's ``retry_policy``): a preempted or evicted
job is tried again after the cluster had time to free its GPUs, a lost apiserver soon (the
retry reattaches to the running job), and failures a retry would only repeat (a gang that
does not fit, an out-of-memory kill, an image that cannot be pulled, a job Kubernetes
refuses) fail at once.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import (
    DAG,
    ExceptionRetryPolicy,
    Param,
    RetryAction,
    RetryRule,
    Variable,
    XComArg,
    task,
)

from airflow_volcano_wandb.exceptions import (
    ApiserverUnreachableError,
    ImagePullError,
    JobPreemptedError,
    JobRefusedError,
    JobUnschedulableError,
    OOMKilledError,
)
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

BEST_ACCURACY_VARIABLE = "volcano_pytorch_best_accuracy"
METRIC = "eval/accuracy"

TRAINING_RETRY_POLICY = ExceptionRetryPolicy(
    rules=[
        RetryRule(
            exception=JobPreemptedError,
            action=RetryAction.RETRY,
            retry_delay=timedelta(minutes=15),
            reason="preempted or evicted: retry once the cluster has room again",
        ),
        RetryRule(
            exception=ApiserverUnreachableError,
            action=RetryAction.RETRY,
            retry_delay=timedelta(minutes=1),
            reason="lost the Kubernetes API: the retry reattaches to the job",
        ),
        RetryRule(
            exception=[JobUnschedulableError, OOMKilledError, ImagePullError, JobRefusedError],
            action=RetryAction.FAIL,
            reason="a retry would fail the same way: fix the resources, image or template",
        ),
    ],
    # Anything else (a trainer exit code, a deleted job) uses retries=2 and retry_delay.
)

with DAG(
    dag_id="volcano_pytorch_retraining",
    description="Scheduled retraining on Volcano, gated on the W&B eval metric",
    schedule="@weekly",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    tags=["volcano", "pytorch", "wandb", "retraining"],
    # A schema for the run's conf too: a manual run or the REST API cannot send just anything.
    params={
        "namespace": Param(
            "wandb", type="string", pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", maxLength=63
        ),
        "wandb_entity": Param("airflow", type="string", minLength=1, maxLength=128),
        "wandb_project": Param("volcano-ddp", type="string", minLength=1, maxLength=128),
    },
) as dag:
    train = VolcanoPyTorchJobOperator(
        task_id="train",
        template="templates/volcano-pytorch-queue-template.yaml",
        image_uri="ghcr.io/example/volcano-ddp-mlp:latest",
        allowed_images=["ghcr.io/example/*"],  # the registry paths you control
        replicas={"worker": 2},
        namespace="{{ params.namespace }}",
        wandb_entity="{{ params.wandb_entity }}",
        wandb_project="{{ params.wandb_project }}",
        wandb_summary_keys=[METRIC],
        deferrable=True,
        pending_timeout=1800,
        retries=2,
        retry_policy=TRAINING_RETRY_POLICY,
    )

    @task.branch
    def decide(summary: dict | None) -> str:
        accuracy = (summary or {}).get(METRIC)
        best = float(Variable.get(BEST_ACCURACY_VARIABLE, default="-inf"))
        if accuracy is None:
            print(f"No {METRIC} in the W&B summary; not promoting")
            return "keep_current"
        if float(accuracy) <= best:
            print(f"{METRIC}={accuracy} does not beat the promoted {best}; not promoting")
            return "keep_current"
        return "promote"

    @task
    def promote(summary: dict) -> float:
        accuracy = float(summary[METRIC])
        Variable.set(BEST_ACCURACY_VARIABLE, str(accuracy))
        print(f"Promoted the model with {METRIC}={accuracy}")
        return accuracy

    @task
    def keep_current() -> None:
        print("Keeping the current model")

    summary = XComArg(train, key="wandb_summary")
    decide(summary) >> [promote(summary), keep_current()]

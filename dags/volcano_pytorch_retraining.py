"""Weekly retraining on Volcano, and a promotion DAG scheduled on the model it produces.

``volcano_pytorch_retraining`` trains and, on success, updates the asset ``MODEL``: its event
carries the W&B run (id, URL, ``eval/accuracy``), the Volcano job, the image and the replica
counts (see docs/assets.md). ``volcano_pytorch_promote`` is scheduled on that asset: it reads
the metric from the event and promotes only on improvement. The best promoted accuracy is kept
in the asset's own state store (Airflow 3.3, AIP-103), next to the asset it describes, not in a
global Variable; before 3.3, which has no such store, ``airflow_compat.asset_state`` keeps it in
a Variable (with a warning). A run without the metric (W&B offline, say) is never promoted.

The training step retries by cause (Airflow 3.3's ``retry_policy``): a preempted or evicted
job is tried again after the cluster had time to free its GPUs, a lost apiserver soon (the
retry reattaches to the running job), and failures a retry would only repeat (a gang that
does not fit, an out-of-memory kill, an image that cannot be pulled, a job Kubernetes
refuses) fail at once. Before Airflow 3.3 the policy is left out (``retry_policy_kwargs``, with
a warning) and the step retries by ``retries`` alone. The retry of a preempted or evicted job
resumes its W&B run (``resume_on``'s default); give the operator a ``checkpoint_volume`` (or,
without a shared volume, ``checkpoint_artifact=True``) and it also continues from that run's
last checkpoint instead of step 0 (docs/trainer.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG, Asset, Param, task

from airflow_volcano_wandb.airflow_compat import asset_state, retry_policy_kwargs
from airflow_volcano_wandb.exceptions import (
    ApiserverUnreachableError,
    ImagePullError,
    JobPreemptedError,
    JobRefusedError,
    JobUnschedulableError,
    OOMKilledError,
)
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

MODEL = Asset("volcano_pytorch_model")
METRIC = "eval/accuracy"
BEST_KEY = "best"  # asset state: {"accuracy": ..., "wandb_run_id": ..., "image": ...}


def training_retry_policy() -> Any:
    """The training step's retry rules (an Airflow 3.3 ``ExceptionRetryPolicy``)."""
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

    return ExceptionRetryPolicy(
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
        # Anything else (a trainer exit code, a deleted job) uses retries=2 and retry_delay,
        # except a run stopped from W&B (StoppedFromWandbError), which is never retried.
    )


with DAG(
    dag_id="volcano_pytorch_retraining",
    description="Scheduled retraining on Volcano; updates the model asset with its W&B run",
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
):
    VolcanoPyTorchJobOperator(
        task_id="train",
        template="templates/volcano-pytorch-queue-template.yaml",
        # A pinned tag: with the seed's imagePullPolicy IfNotPresent a node would keep running
        # whatever ":latest" it pulled first.
        image_uri="ghcr.io/example/volcano-ddp-mlp:1.0.0",
        allowed_images=["ghcr.io/example/*"],  # the registry paths you control
        replicas={"worker": 2},
        namespace="{{ params.namespace }}",
        wandb_entity="{{ params.wandb_entity }}",
        wandb_project="{{ params.wandb_project }}",
        wandb_summary_keys=[METRIC],
        deferrable=True,
        pending_timeout=1800,
        # The trainer's master prints a line every epoch: half an hour of silence is a hang
        # (a stuck collective, a dead data loader), not training. Raise it for longer epochs.
        stall_timeout=1800,
        retries=2,
        # Each try's bound: a week's retraining takes well under this; past it the job is
        # deleted (every rank's GPUs freed) and the try fails with JobTimeoutError.
        execution_timeout=timedelta(hours=6),
        outlets=[MODEL],
        **retry_policy_kwargs(training_retry_policy),
    )


def promotion(extra: Mapping[str, Any], best: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The new best model record when the asset event's model beats ``best``, else ``None``.

    :param extra: the ``extra`` of the model asset's event (docs/assets.md).
    :param best: the promoted record from the asset's state, ``None`` before the first one.
    """
    accuracy = (extra.get("wandb_summary") or {}).get(METRIC)
    if accuracy is None:
        print(f"No {METRIC} in the asset event of W&B run {extra.get('wandb_run_id')}")
        return None
    if best is not None and float(accuracy) <= float(best["accuracy"]):
        print(f"{METRIC}={accuracy} does not beat the promoted {best['accuracy']}")
        return None
    return {
        "accuracy": float(accuracy),
        "wandb_run_id": extra.get("wandb_run_id"),
        "wandb_run_url": extra.get("wandb_run_url"),
        "image": extra.get("image"),
    }


with DAG(
    dag_id="volcano_pytorch_promote",
    description="Promote a retrained model when its W&B eval metric beats the promoted one",
    schedule=[MODEL],
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,  # one comparison at a time: the state is read, then written
    tags=["volcano", "pytorch", "wandb", "retraining"],
):

    @task.branch(inlets=[MODEL])
    def evaluate(*, ti: Any, triggering_asset_events: Any, **context: Any) -> str:
        # Several trainings may have finished since the last promotion run: the latest counts.
        extra = dict(triggering_asset_events[MODEL][-1].extra)
        ti.xcom_push(key="candidate", value=extra)
        best = promotion(extra, asset_state(context, MODEL).get(BEST_KEY))
        ti.xcom_push(key="best", value=best)
        return "promote" if best else "keep_current"

    @task(inlets=[MODEL])
    def promote(*, ti: Any, **context: Any) -> dict[str, Any]:
        best = ti.xcom_pull(task_ids="evaluate", key="best")
        asset_state(context, MODEL).set(BEST_KEY, best)
        print(f"Promoted W&B run {best['wandb_run_id']} with {METRIC}={best['accuracy']}")
        return best

    @task
    def keep_current() -> None:
        print("Keeping the current model")

    evaluate() >> [promote(), keep_current()]

"""DAGs the integration tests run with ``dag.test(run_conf=...)``.

Everything that varies between tests (the template, namespace, replicas, simulated exit
codes) comes in through params, so each test says exactly what it runs.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pendulum
from airflow.sdk import DAG

from airflow_volcano_wandb import exceptions as errors
from airflow_volcano_wandb.airflow_compat import retry_policy_kwargs
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


def _dag(dag_id: str, **params: object) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        render_template_as_native_obj=True,
        params={**PARAMS, **params},
    )


with _dag("avw_test_sync") as sync_dag:
    _operator(deferrable=False)

with _dag("avw_test_deferrable") as deferrable_dag:
    _operator(deferrable=True)

# A deferrable task that first waits 15 s in its worker (tests/conftest.py makes 0 the default).
with _dag("avw_test_defer_after") as defer_after_dag:
    _operator(deferrable=True, defer_after=15)

# A gang the cluster cannot place: fit_check="warn" (as where an autoscaler adds nodes) lets
# it reach Volcano, so the wait's own verdict and Volcano's reason are what these test.
with _dag("avw_test_pending_sync") as pending_sync_dag:
    _operator(deferrable=False, pending_timeout=8, fit_check="warn")

with _dag("avw_test_pending_deferrable") as pending_deferrable_dag:
    _operator(deferrable=True, pending_timeout=8, fit_check="warn")

with _dag("avw_test_keep") as keep_dag:
    _operator(deferrable=False, on_finish_action="keep")

with _dag("avw_test_submit_only") as submit_only_dag:
    _operator(wait_for_completion=False)

with _dag("avw_test_submit_then_sense") as submit_then_sense_dag:
    submit = _operator(wait_for_completion=False)
    sense = VolcanoJobSensor(
        task_id="wait",
        job_name="{{ ti.xcom_pull(task_ids='train', key='volcano_job')['name'] }}",
        namespace="{{ params.namespace }}",
        poke_interval=1,
        deferrable=False,
        follow_master_log=True,  # in poke mode: a thread of the task's process
    )
    submit >> sense


def _record_failure(context) -> None:
    """Write the exception a try failed with (class and fields) where the test reads it."""
    import json

    error = context["exception"]
    record = {
        "try": context["ti"].try_number,
        "class": type(error).__name__,
        **{k: getattr(error, k, None) for k in ("exit_code", "task", "pod", "reason", "job")},
    }
    with open(context["params"]["record_to"], "a") as out:
        out.write(json.dumps(record) + "\n")


# The rules dags/volcano_pytorch_retraining.py sets, with delays short enough for a test: the
# causes a retry may cure, retried after 7 s, and those it would only repeat, failed at once.
RETRIED = [errors.JobPreemptedError, errors.ApiserverUnreachableError]
FAILED_AT_ONCE = [
    errors.JobUnschedulableError,
    errors.OOMKilledError,
    errors.ImagePullError,
    errors.JobRefusedError,
]


def fast_retry_policy() -> Any:
    """An Airflow 3.3 ``ExceptionRetryPolicy`` (left out before 3.3: ``retry_policy_kwargs``)."""
    from airflow.sdk import ExceptionRetryPolicy, RetryAction, RetryRule

    retry = RetryRule(
        exception=RETRIED,
        action=RetryAction.RETRY,
        retry_delay=timedelta(seconds=7),
        reason="preempted or apiserver lost: retry",
    )
    fail = RetryRule(
        exception=FAILED_AT_ONCE, action=RetryAction.FAIL, reason="will fail again: fail fast"
    )
    return ExceptionRetryPolicy(rules=[retry, fail])


with _dag(
    "avw_test_retry_policy", first_try_annotations={}, record_to="/dev/null"
) as retry_policy_dag:
    VolcanoPyTorchJobOperator(
        task_id="train",
        template="{{ params.template }}",
        namespace="{{ params.namespace }}",
        # A behaviour only the first try's pods show (e.g. an eviction), so a retry can succeed.
        pod_annotations=(
            "{{ params.first_try_annotations if ti.try_number == 1 else params.pod_annotations }}"
        ),
        image_uri="example.org/avw/trainer:test",
        wandb_entity="test-entity",
        wandb_project="test-project",
        wandb_mode="offline",
        poll_interval=1,
        deferrable=False,
        retries=2,
        # The test checks the policy's decision as Airflow recorded it (its delay included),
        # not dag.test()'s timing; short delays keep the run short either way.
        retry_delay=timedelta(seconds=1),
        **retry_policy_kwargs(fast_retry_policy),
        on_retry_callback=_record_failure,
        on_failure_callback=_record_failure,
    )

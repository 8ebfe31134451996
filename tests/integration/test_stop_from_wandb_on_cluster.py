"""A W&B run stopped from the W&B UI or API ends the Volcano job and fails the task, unretried.

The trainer's side (its W&B client sees the stop and exits with the stop code) is
tests/trainer/test_train_wandb_stop.py, against the W&B stand-in. Here the simulated master
exits with
that code, as the trainer does: under the seed's ``restartPolicy: OnFailure`` the simulated
kubelet restarts it in its pod (the job stays ``Running``: Volcano's ``exitCode`` policies act
on failed pods only), and the wait finds the stop in the pods it reads for the restart budget;
the job is deleted after a fresh GET and LIST confirm it. A DAG with ``retries=2`` runs through
``dag.test()``: Airflow's own task runner fails the task at once.

The last two stop a run whose trainer misses the stop (the simulated master trains on): the
run is stopped in the W&B stand-in, the wait hears it from W&B (``RunStoppedStatus``), marks
the job, and deletes it ``wandb_stop_grace`` later, as W&B Launch's agent ends such a run.
"""

from __future__ import annotations

import asyncio

import pytest

from airflow_volcano_wandb.exceptions import ContainerError, StoppedFromWandbError
from airflow_volcano_wandb.job.ownership import WANDB_RUN_LABEL
from airflow_volcano_wandb.wait.wandb_stop import STOP_SEEN_ANNOTATION, STOPPED_FROM_WANDB_EXIT_CODE
from test_support import operator_tries as support
from test_support.cluster_jobs import (
    SIM_DURATION,
    SIM_EXIT_CODE,
    list_jobs,
    run_retry_policy_dag,
    seed_template,
    submit_job,
    wait_until,
)
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import ENTITY, PROJECT, STANDIN_CONN_ID, online_standin_run

pytestmark = pytest.mark.cluster

DAG_ID = "avw_stop_from_wandb"
STOP = str(STOPPED_FROM_WANDB_EXIT_CODE)
#: The master's trainer "sees the stop" a second after it starts (and again after a restart).
STOPPED_MASTER = {SIM_DURATION: "1", SIM_EXIT_CODE: STOP}


def _assert_stopped(error: StoppedFromWandbError) -> None:
    assert isinstance(error, ContainerError)  # what callers caught before
    assert "stopped from the W&B UI or API" in str(error), error
    assert "rank master-0's trainer ended" in str(error) and f"exit code {STOP}" in str(error)
    assert (error.task, error.exit_code) == ("master", STOPPED_FROM_WANDB_EXIT_CODE), error
    assert error.pod.endswith("-master-0"), error


def test_a_run_stopped_from_wandb_fails_the_deferred_task_and_its_job_is_deleted_with_a_stub_ti(
    cluster,
):
    api, namespace = cluster
    template = seed_template(master=STOPPED_MASTER, worker={SIM_DURATION: "600"})
    # A budget far above the restarts: the stop, not a crash loop, ends the wait.
    op = support.operator(
        namespace=namespace, template=template, deferrable=True, max_container_restarts=50
    )
    ti = support.StubTaskInstance(DAG_ID, "train", "deferred")
    trigger = support.execute_operator(op, ti)
    events = asyncio.run(support.collect_events(trigger, timeout=120))
    assert [event["outcome"] for event in events] == ["stopped_from_wandb"]
    with pytest.raises(StoppedFromWandbError) as failure:
        op.execute_complete(support.context_for(ti), events[0], run=None)
    _assert_stopped(failure.value)
    # Who stopped it is on the run's page: the trainer is told only that it was stopped.
    assert "; the W&B run: https://wandb.ai/test-entity/test-project/runs/" in str(failure.value)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_the_poking_sensor_maps_a_stop_the_same_way_with_a_stub_ti(cluster):
    api, namespace = cluster
    job = submit_job(
        api, namespace, "sensed", master_seconds=1, master_annotations={SIM_EXIT_CODE: STOP}
    )
    with pytest.raises(StoppedFromWandbError) as failure:
        support.poke_until_verdict(job, namespace, DAG_ID, timeout=120)
    _assert_stopped(failure.value)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_a_stopped_run_is_not_retried_despite_retries_left(cluster, tmp_path):
    _, namespace = cluster
    _, tis, records = run_retry_policy_dag(
        tmp_path,
        template=seed_template(master=STOPPED_MASTER, worker={SIM_DURATION: "600"}),
        namespace=namespace,
    )
    assert tis["train"] == ("failed", 1), tis  # retries=2, yet no second try
    assert [(r["try"], r["class"], r["exit_code"]) for r in records] == [
        (1, "StoppedFromWandbError", STOPPED_FROM_WANDB_EXIT_CODE)
    ]


RUN_ID = "stopped-but-training"
#: Seconds the trainer that misses the stop is given: short, so the test is.
GRACE = 3


def _stopped_run(standin: WandbStandin) -> None:
    standin.add_run(ENTITY, PROJECT, RUN_ID, summary={}, state="running")
    standin.stop_run(ENTITY, PROJECT, RUN_ID)


def _assert_unheeded(error: StoppedFromWandbError, standin: WandbStandin) -> None:
    assert f"W&B run {RUN_ID} was marked stopped" in str(error), error
    assert f"did not stop by itself within wandb_stop_grace={GRACE}s" in str(error), error
    asked = [r for r in standin.requests if r.operation == "RunStoppedStatus"]
    assert asked and asked[0].variables["runId"] == RUN_ID, standin.operations()


def test_a_trainer_missing_the_stop_has_its_job_deleted_after_grace_with_a_stub_ti_on_the_standin(
    cluster, wandb_standin
):
    api, namespace = cluster
    _stopped_run(wandb_standin)
    op = support.operator(
        namespace=namespace,
        template=seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"}),
        deferrable=True,
        wandb_stop_grace=GRACE,
        **online_standin_run(RUN_ID),
    )
    ti = support.StubTaskInstance(DAG_ID, "train", "unheeded")
    trigger = support.execute_operator(op, ti)
    events = asyncio.run(support.collect_events(trigger, timeout=120))
    assert [event["outcome"] for event in events] == ["stopped_from_wandb"]
    # The first waiter to hear the stop marked the job: the grace counts from that mark.
    (job,) = list_jobs(api, namespace)
    assert STOP_SEEN_ANNOTATION in job["metadata"]["annotations"], job["metadata"]
    with pytest.raises(StoppedFromWandbError) as failure:
        op.execute_complete(support.context_for(ti), events[0], run=None)
    _assert_unheeded(failure.value, wandb_standin)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_the_poking_sensor_ends_a_job_whose_trainer_misses_the_stop_with_a_stub_ti_on_the_standin(
    cluster, wandb_standin
):
    api, namespace = cluster
    _stopped_run(wandb_standin)
    job = submit_job(api, namespace, "sensed", master_seconds=600, labels={WANDB_RUN_LABEL: RUN_ID})
    with pytest.raises(StoppedFromWandbError) as failure:
        support.poke_until_verdict(
            job,
            namespace,
            DAG_ID,
            timeout=120,
            wandb_conn_id=STANDIN_CONN_ID,
            wandb_stop_grace=GRACE,
            wandb_mode="online",
        )
    _assert_unheeded(failure.value, wandb_standin)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")

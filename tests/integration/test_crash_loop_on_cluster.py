"""A trainer crash-looping under the seed's ``restartPolicy: OnFailure`` fails the task.

On the local cluster the simulated kubelet restarts a container that exits non-zero in its
pod (``testing/cluster/stages/pods.yaml``): ``restartCount`` grows, ``lastState.terminated``
holds the exit, the pod stays ``Running`` and so does the Volcano job, whose status shows no
restart at all. Unlike a real kubelet it restarts at once, with no CrashLoopBackOff wait, so
the budget is passed within seconds here. Without the restart budget each of these waits
would run into its ``execution_timeout`` (or the test's own bound) instead.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.exceptions import TrainerCrashLoopError
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from test_support import operator_tries as support
from test_support.cluster_jobs import (
    SIM_DURATION,
    SIM_EXIT_CODE,
    list_jobs,
    seed_template,
    submit_job,
    wait_until,
)

pytestmark = pytest.mark.cluster

DAG_ID = "avw_crash_loop"
#: What the simulated trainer prints when it exits: the last line of the previous container.
EXIT_LINE = "exited with code 3 (Error)"


def _crashing(
    namespace: str, task: str, *, budget: int, **options: Any
) -> VolcanoPyTorchJobOperator:
    """The operator on the seed (``OnFailure``), one task's trainer exiting 3 a second after
    every start, with ``max_container_restarts=budget``."""
    crash = {SIM_DURATION: "1", SIM_EXIT_CODE: "3"}
    runs = {SIM_DURATION: "600"}
    template = seed_template(**{"master": runs, "worker": runs, task: crash})
    return support.operator(
        namespace=namespace, template=template, max_container_restarts=budget, **options
    )


def _assert_named(error: TrainerCrashLoopError, rank: str, budget: int) -> None:
    assert error.pod.endswith(f"-{rank}") and error.task == rank.split("-")[0], error
    assert (error.container, error.exit_code, error.reason) == (error.task, 3, "Error")
    assert error.restarts > budget
    assert f"rank {rank}" in str(error) and f"max_container_restarts={budget}" in str(error)
    # The last line of the container before its restart (previous=True), not the restarted one.
    assert EXIT_LINE in str(error), error


def test_a_crash_looping_master_fails_the_deferred_task_and_its_job_is_deleted_with_a_stub_ti(
    cluster,
):
    api, namespace = cluster
    op = _crashing(namespace, "master", budget=2, deferrable=True)
    ti = support.StubTaskInstance(DAG_ID, "train", "deferred")
    trigger = support.execute_operator(op, ti)
    assert trigger.serialize()[1]["max_container_restarts"] == 2
    events = asyncio.run(support.collect_events(trigger, timeout=120))
    assert [event["outcome"] for event in events] == ["crash_loop"]
    assert events[0]["crash_loop"]["rank"] == "master-0"
    with pytest.raises(TrainerCrashLoopError) as failure:
        op.execute_complete(support.context_for(ti), events[0], run=None)
    _assert_named(failure.value, "master-0", budget=2)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_a_crash_looping_worker_fails_the_sync_wait_too_with_a_stub_ti(cluster):
    api, namespace = cluster
    # Without a budget: JobTimeoutError. Two restarts take about a minute (the kubelet waits
    # 10 s, then 20 s); four times that on a loaded machine.
    within = timedelta(seconds=240)
    op = _crashing(namespace, "worker", budget=1, deferrable=False, execution_timeout=within)
    with pytest.raises(TrainerCrashLoopError) as failure:
        support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "sync"))
    _assert_named(failure.value, "worker-0", budget=1)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_the_poking_sensor_applies_the_same_budget_with_a_stub_ti(cluster):
    api, namespace = cluster
    job = submit_job(
        api, namespace, "sensed", master_seconds=1, master_annotations={SIM_EXIT_CODE: "3"}
    )
    with pytest.raises(TrainerCrashLoopError) as failure:
        support.poke_until_verdict(job, namespace, DAG_ID, timeout=120, max_container_restarts=2)
    _assert_named(failure.value, "master-0", budget=2)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_a_job_that_restarts_within_its_budget_and_then_completes_succeeds_with_a_stub_ti(
    cluster,
):
    """The master crashes a few times, then its trainer gets through (its pod's exit code is
    changed to 0 meanwhile): restarts within the budget are no failure."""
    api, namespace = cluster
    core = k8s.CoreV1Api(api)
    within = timedelta(seconds=120)
    op = _crashing(namespace, "master", budget=20, deferrable=False, execution_timeout=within)

    def recover_after_two_restarts() -> None:
        def master():
            pods = core.list_namespaced_pod(namespace, label_selector="volcano.sh/task-spec=master")
            for pod in pods.items:
                if (
                    pod.status.container_statuses
                    and pod.status.container_statuses[0].restart_count >= 2
                ):
                    return pod
            return None

        pod = wait_until(master, timeout=90, what="the master restarted twice")
        patch = {"metadata": {"annotations": {SIM_EXIT_CODE: "0"}}}
        core.patch_namespaced_pod(pod.metadata.name, namespace, patch)

    recovery = threading.Thread(target=recover_after_two_restarts, daemon=True)
    recovery.start()
    result = support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "recovers"))
    recovery.join(timeout=5)
    assert result["phase"] == "Completed"

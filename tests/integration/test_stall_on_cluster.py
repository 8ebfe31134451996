"""A running job whose master prints nothing for ``stall_timeout`` fails the task.

On the local cluster a simulated container prints its start lines once and then nothing
while it "runs" (``testing/cluster/podlogs.py``): a master running a minute is a stalled
trainer, by its log. Its pod and the Volcano job stay ``Running`` all along, so without the
stall timeout each of these waits would run until the master ends or ``execution_timeout``.
"""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.exceptions import TrainingStalledError
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from test_support import operator_tries as support
from test_support.cluster_jobs import (
    SIM_DURATION,
    list_jobs,
    seed_template,
    submit_job,
    wait_until,
)

pytestmark = pytest.mark.cluster

DAG_ID = "avw_stall"
STALL_TIMEOUT = 4


def _assert_stalled(error: TrainingStalledError) -> None:
    assert error.pod.endswith("-master-0") and error.task == "master", error
    assert error.stall_timeout == STALL_TIMEOUT and error.running_for >= STALL_TIMEOUT
    text = str(error)
    assert f"no log line for at least {STALL_TIMEOUT}s" in text, text
    assert f"stall_timeout={STALL_TIMEOUT}" in text, text
    # Every rank's last lines, each under its rank: where a hung collective stopped.
    assert "the last log lines of each rank:" in text, text
    assert "[master-0] [sim] running for 60s" in text, text
    assert "[worker-0] [sim] running for 600s" in text, text


def test_a_silent_master_fails_the_deferred_task_and_its_job_is_deleted_with_a_stub_ti(
    cluster,
):
    api, namespace = cluster
    runs = {SIM_DURATION: "600"}
    op = support.operator(
        namespace=namespace,
        template=seed_template(master={SIM_DURATION: "60"}, worker=runs),
        deferrable=True,
        stall_timeout=STALL_TIMEOUT,
    )
    ti = support.StubTaskInstance(DAG_ID, "train", "deferred")
    trigger = support.execute_operator(op, ti)
    assert trigger.serialize()[1]["stall_timeout"] == STALL_TIMEOUT
    started = time.monotonic()
    events = asyncio.run(support.collect_events(trigger, timeout=50))
    assert [event["outcome"] for event in events] == ["stalled"]
    assert time.monotonic() - started < 50  # the master would have run 60 s
    assert events[0]["stall"]["rank"] == "master-0"
    with pytest.raises(TrainingStalledError) as failure:
        op.execute_complete(support.context_for(ti), events[0], run=None)
    _assert_stalled(failure.value)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_the_poking_sensor_judges_a_stall_the_same_way_with_a_stub_ti(cluster):
    api, namespace = cluster
    job = submit_job(api, namespace, "sensed", master_seconds=60)
    with pytest.raises(TrainingStalledError) as failure:
        support.poke_until_verdict(job, namespace, DAG_ID, timeout=50, stall_timeout=STALL_TIMEOUT)
    _assert_stalled(failure.value)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_a_master_that_printed_lately_is_not_silent_nor_one_ending_in_time_stalled_with_a_stub_ti(
    cluster,
):
    """The probe itself on the cluster's pod log (``sinceSeconds``): the master's start lines
    are in the log of the last minute, not in that of the last second once a few seconds
    have passed. And a job whose master ends before ``stall_timeout`` completes."""
    api, namespace = cluster
    submit_job(api, namespace, "probed", master_seconds=60)
    core = k8s.CoreV1Api(api)

    def running_master() -> k8s.V1Pod | None:
        pods = core.list_namespaced_pod(namespace, label_selector="volcano.sh/task-spec=master")
        running = [p for p in pods.items if (p.status.container_statuses or [None])[0]]
        return next((p for p in running if p.status.container_statuses[0].state.running), None)

    master = wait_until(running_master, timeout=60, what="the master running")
    name, container = master.metadata.name, master.spec.containers[0].name
    hook = VolcanoHook()
    assert (
        wait_until(
            lambda: hook.read_pod_log_since(name, namespace, container, 60),
            timeout=20,
            what="the master's start lines in its log",
        )
        == "["
    )  # one byte (limitBytes=1) of "[sim] pod ..."
    time.sleep(3)
    assert hook.read_pod_log_since(name, namespace, container, 1) == ""

    op = support.operator(
        namespace=namespace,
        template=seed_template(master={SIM_DURATION: "3"}, worker={SIM_DURATION: "600"}),
        deferrable=False,
        stall_timeout=30,
        execution_timeout=timedelta(seconds=60),
    )
    result = support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "in-time"))
    assert result["phase"] == "Completed"

"""VolcanoJobTrigger on the real cluster: one shared watch, prompt events, kill deletes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.job.ownership import MANAGED_BY, MANAGED_BY_LABEL
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wait import job_watcher
from test_support.cluster_jobs import (
    as_in_a_triggerer,
    end_master,
    list_jobs,
    list_pods,
    submit_job,
    wait_until,
)
from test_support.operator_tries import first_event, trigger_of
from test_support.waits import reloaded

pytestmark = pytest.mark.cluster


def test_serialize_round_trips_to_an_equal_trigger():
    job = {"job_name": "j", "namespace": "ns", "job_uid": "u"}
    trigger = VolcanoJobTrigger(
        **job, pending_timeout=30, deadline=123.0, poll_interval=2, delete_on_kill=False
    )
    classpath, kwargs = trigger.serialize()
    assert reloaded(trigger).serialize() == (classpath, kwargs)
    assert classpath == "airflow_volcano_wandb.triggers.volcano.VolcanoJobTrigger"


def test_many_triggers_share_one_watch_and_each_fires_once(cluster):
    api, namespace = cluster
    # Labelled as the operator labels its jobs, so every trigger stays on the managed watch
    # (an unlabelled job moves its trigger to the namespace-wide watch: a second connection).
    managed = {MANAGED_BY_LABEL: MANAGED_BY}
    jobs = [
        submit_job(api, namespace, f"shared-{i}", master_seconds=2 + i, labels=managed)
        for i in range(6)
    ]

    async def wait_all():
        triggers = [trigger_of(j, namespace, poll_interval=1) for j in jobs]
        watchers_seen = []
        tasks = [asyncio.create_task(first_event(t)) for t in triggers]
        while not all(t.done() for t in tasks):
            watchers_seen.append(job_watcher.active_watchers())
            await asyncio.sleep(0.2)
        return [t.result() for t in tasks], watchers_seen

    events, watchers_seen = asyncio.run(wait_all())
    assert [e["outcome"] for e in events] == ["succeeded"] * 6
    assert {e["job_name"] for e in events} == {f"shared-{i}" for i in range(6)}
    assert max(watchers_seen) == 1  # one watch connection for all six waits
    assert job_watcher.active_watchers() == 0  # the last one out closed it


def test_the_event_comes_from_the_watch_not_from_a_poll(cluster):
    """With a 10-minute poll interval, only the watch can end the wait within the test.

    How fast it ends is a benchmark's business (``make bench``: completion latency), not a
    timed assertion on a shared machine.
    """
    api, namespace = cluster
    job = submit_job(api, namespace, "prompt", master_seconds=3)

    async def wait():
        async for event in trigger_of(job, namespace, poll_interval=600).run():
            return event.payload

    event = asyncio.run(asyncio.wait_for(wait(), timeout=120))
    assert event["outcome"] == "succeeded"
    assert event["job_uid"] == job["metadata"]["uid"]


def test_a_wait_in_a_fresh_triggerer_process_imports_no_kubernetes_client_on_its_event_loop(
    cluster,
):
    """A trigger's wait, in a fresh interpreter as a triggerer's trigger runner holds it,
    imports nothing on the event loop's thread but Airflow's own runtime (its SDK's logging and
    comms, which a triggerer has loaded before it runs a trigger): the Kubernetes clients, the
    cncf provider and aiohttp are imported off the loop (``triggers/off_loop.py``). On the loop,
    they stalled every other trigger of the triggerer 2.6 s on an idle 2-core machine, and
    15.7 s in the KubernetesExecutor trial's triggerer pod."""
    api, namespace = cluster
    managed = {MANAGED_BY_LABEL: MANAGED_BY}
    job = submit_job(api, namespace, "loop-imports", master_seconds=3, labels=managed)
    name, uid = job["metadata"]["name"], job["metadata"]["uid"]
    module = "test_support.loop_imports"
    run = subprocess.run(
        [sys.executable, "-m", module, name, namespace, uid],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.splitlines()[-1])
    print(f"longest stall of the loop: {seen['max_gap']:.3f} s")
    assert seen["outcome"] == "succeeded", seen
    foreign = [m for m in seen["on_loop"] if not m.startswith(("airflow.sdk.", "asgiref"))]
    assert not foreign, foreign


def test_a_wait_that_ends_early_fires_only_once_the_deferral_settled(cluster, monkeypatch):
    """The job ends within seconds of the deferral; the event waits until
    ``defer_settle_seconds`` after it, and says what the job did."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS", "20")
    api, namespace = cluster
    job = submit_job(api, namespace, "settled", master_seconds=1)
    deferred_at = time.time()

    async def wait():
        trigger = trigger_of(job, namespace, poll_interval=1, deferred_at=deferred_at)
        async for event in trigger.run():
            return event.payload, time.time()

    event, fired_at = asyncio.run(asyncio.wait_for(wait(), timeout=120))
    assert event["outcome"] == "succeeded"
    assert fired_at >= deferred_at + 20


def _running_job(api, namespace: str, name: str) -> dict:
    """A job whose master trains for ten minutes, once its pods exist."""
    job = submit_job(api, namespace, name, master_seconds=600)
    wait_until(lambda: list_pods(api, namespace), 60, what="pods")
    return job


async def _cancelled_trigger(
    job: dict, namespace: str, monkeypatch, *, task_left: bool | None = True
) -> VolcanoJobTrigger:
    """The job's trigger in a triggerer whose task has ``task_left`` deferred: let it wait a
    while, then cancel it, as the triggerer does before on_kill."""
    trigger = trigger_of(job, namespace)
    as_in_a_triggerer(trigger, monkeypatch, task_left=task_left)
    waiting = asyncio.create_task(trigger.run().__anext__())
    await asyncio.sleep(2)
    assert not waiting.done()
    waiting.cancel()
    return trigger


def test_on_kill_deletes_the_job_and_its_pods(cluster, monkeypatch):
    api, namespace = cluster
    job = _running_job(api, namespace, "killed")

    async def run_then_kill():
        trigger = await _cancelled_trigger(job, namespace, monkeypatch, task_left=True)
        await trigger.on_kill()

    asyncio.run(run_then_kill())
    wait_until(
        lambda: not list_jobs(api, namespace) and not list_pods(api, namespace),
        30,
        what="job and pods deleted",
    )


@pytest.mark.parametrize("task_left", [False, None], ids=["still-deferred", "state-unknown"])
def test_on_kill_of_a_trigger_handed_over_leaves_the_job_running(cluster, monkeypatch, task_left):
    """Airflow 3.3 cancels a trigger that moves to another triggerer as if a user killed it
    and calls on_kill; the task is still deferred (or its state unknown): no deletion."""
    api, namespace = cluster
    name = f"handed-over-{'deferred' if task_left is False else 'unknown'}"
    job = _running_job(api, namespace, name)

    async def run_then_hand_over():
        trigger = await _cancelled_trigger(job, namespace, monkeypatch, task_left=task_left)
        await trigger.on_kill()
        await trigger.cleanup()

    asyncio.run(run_then_hand_over())
    time.sleep(3)  # a deletion, had one been sent, is seen by now
    (left,) = [j for j in list_jobs(api, namespace) if j["metadata"]["name"] == name]
    assert left["metadata"]["uid"] == job["metadata"]["uid"]
    assert not left["metadata"].get("deletionTimestamp")


def test_on_kill_of_a_stale_trigger_whose_job_ended_leaves_the_job(cluster, monkeypatch):
    """A handed-over trigger's on_kill that reads the task's state only after the new
    triggerer's trigger saw the job end (its task resumed: no longer deferred) must not take
    that for a kill. A kill stops training; an ended job has none to stop (HA trial:
    tests/reliability/test_ha_airflow.py)."""
    api, namespace = cluster
    job = _running_job(api, namespace, "ended-elsewhere")

    trigger = asyncio.run(_cancelled_trigger(job, namespace, monkeypatch, task_left=True))
    end_master(api, namespace)  # meanwhile, the job ends (and the other triggerer fires)
    wait_until(lambda: _phase(api, namespace) == "Completed", 60, what="the job completed")
    asyncio.run(trigger.on_kill())
    time.sleep(3)  # a deletion, had one been sent, is seen by now
    (left,) = list_jobs(api, namespace)
    assert left["metadata"]["uid"] == job["metadata"]["uid"]
    assert not left["metadata"].get("deletionTimestamp")


def _phase(api, namespace: str) -> str | None:
    jobs = list_jobs(api, namespace)
    return ((jobs[0].get("status") or {}).get("state") or {}).get("phase") if jobs else None


def test_on_kill_deletes_the_job_even_when_cancelled_itself(cluster, monkeypatch):
    """Airflow's triggerer cancels a killed task's trigger again on its next loop, which can
    land while on_kill waits; the deletion must go on regardless."""
    api, namespace = cluster
    job = _running_job(api, namespace, "killed-twice")

    async def kill_then_cancel_the_kill():
        trigger = await _cancelled_trigger(job, namespace, monkeypatch, task_left=True)
        killing = asyncio.create_task(trigger.on_kill())
        await asyncio.sleep(0)  # on_kill has started its deletion...
        killing.cancel()  # ...and is cancelled at once
        with pytest.raises(asyncio.CancelledError):
            await killing
        await asyncio.sleep(5)  # the loop lives on, as the triggerer's does

    asyncio.run(kill_then_cancel_the_kill())
    wait_until(
        lambda: not list_jobs(api, namespace) and not list_pods(api, namespace),
        30,
        what="job and pods deleted",
    )


def test_a_job_recreated_under_the_same_name_counts_as_deleted(cluster):
    api, namespace = cluster
    old = submit_job(api, namespace, "recreated", master_seconds=600)
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch.volcano.sh",
        "v1alpha1",
        namespace,
        "jobs",
        "recreated",
        body=k8s.V1DeleteOptions(propagation_policy="Foreground"),
    )
    wait_until(lambda: not list_jobs(api, namespace), 60, what="old job gone")
    submit_job(api, namespace, "recreated", master_seconds=600)

    async def wait():
        trigger = VolcanoJobTrigger(
            job_name="recreated", namespace=namespace, job_uid=old["metadata"]["uid"]
        )
        async for event in trigger.run():
            return event.payload

    assert asyncio.run(asyncio.wait_for(wait(), 30))["outcome"] == "deleted"

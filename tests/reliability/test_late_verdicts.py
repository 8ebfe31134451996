"""Verdicts that must survive what a waiter forgets or cannot see (issue: Verdicts II).

On the shared local cluster:

- a trigger restarted (a triggerer restart or handover) while its job, whose gang was whole,
  is replacing a lost worker: the new trigger reads the job's gang-whole mark and waits, where
  it used to judge a pending timeout from the job's creation and delete hours of training;
- a job that completes while the watch is cut, just before the task's deadline: the deadline's
  verdict is confirmed by a fresh GET, so the task gets the job's real outcome, not a timeout;
- a watch cut every few seconds (an idle-timeout proxy) for longer than
  ``watch_failure_grace``: the wait falls back to reading the job and ends with its real
  outcome, not a lost watch.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from kubernetes import client

from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wait.judge import GANG_WHOLE_ANNOTATION
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, custom, seed_template

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

DAG_ID = "avw_rel_late_verdicts"


def _job_with_worker_on(namespace: str, name: str, node_label: str) -> dict:
    """The seed's job, its master running 40 s, its worker only on nodes with ``node_label``."""
    job = seed_template(master={SIM_DURATION: "40"}, worker={SIM_DURATION: "600"})
    job["metadata"].update(name=name, namespace=namespace, labels={})
    for task in job["spec"]["tasks"]:
        task["template"]["spec"]["containers"][0]["image"] = "example.org/trainer:1"
        if task["name"] == "worker":
            task["template"]["spec"]["nodeSelector"] = {node_label: "yes"}
    return job


def test_a_restarted_trigger_knows_the_gang_was_whole_and_waits_for_the_lost_worker(
    admin, volcano_namespace, kubernetes_connection
):
    namespace = volcano_namespace
    core = client.CoreV1Api(admin)
    node = core.list_node().items[0].metadata.name
    label = f"avw-test.io/worker-home-{namespace}"  # this test's own: no other pod selects it
    core.patch_node(node, {"metadata": {"labels": {label: "yes"}}})
    try:
        job = custom(admin).create_namespaced_custom_object(
            "batch.volcano.sh",
            "v1alpha1",
            namespace,
            "jobs",
            _job_with_worker_on(namespace, "gang", label),
        )
        uid = job["metadata"]["uid"]

        def trigger() -> VolcanoJobTrigger:
            return VolcanoJobTrigger(
                job_name="gang", namespace=namespace, job_uid=uid, pending_timeout=3
            )

        def marked() -> bool:
            (current,) = support.list_jobs(admin, namespace)
            return GANG_WHOLE_ANNOTATION in (current["metadata"].get("annotations") or {})

        async def first_trigger_until_the_gang_is_whole() -> None:
            waiting = asyncio.create_task(support.collect_events(trigger(), timeout=120))
            await asyncio.to_thread(support.wait_until, marked, 60, what="the gang-whole mark")
            waiting.cancel()  # the triggerer restarts, or hands the trigger over
            # A cancelled trigger ends (wait/wake.py: one cancelled as its job changed went on).
            done, _ = await asyncio.wait({waiting}, timeout=30)
            assert done, "the cancelled trigger still runs 30 s later"

        asyncio.run(first_trigger_until_the_gang_is_whole())
        # The worker is lost, and its replacement cannot be placed for now.
        core.patch_node(node, {"metadata": {"labels": {label: None}}})
        (worker,) = [
            p for p in core.list_namespaced_pod(namespace).items if "worker" in p.metadata.name
        ]
        core.delete_namespaced_pod(worker.metadata.name, namespace, grace_period_seconds=0)
        support.wait_until(
            lambda: any(
                p.status.phase == "Pending" and p.metadata.uid != worker.metadata.uid
                for p in core.list_namespaced_pod(namespace).items
                if "worker" in p.metadata.name
            ),
            60,
            what="the worker's replacement, Pending",
        )

        async def second_trigger() -> list[dict]:
            waiting = asyncio.create_task(support.collect_events(trigger(), timeout=150))
            await asyncio.sleep(12)  # four times pending_timeout, with a rank missing
            assert not waiting.done(), waiting.result()
            await asyncio.to_thread(core.patch_node, node, {"metadata": {"labels": {label: "yes"}}})
            return await waiting

        events = asyncio.run(second_trigger())
        assert [e["outcome"] for e in events] == ["succeeded"], events
        (current,) = support.list_jobs(admin, namespace)
        assert current["metadata"]["uid"] == uid
    finally:
        core.patch_node(node, {"metadata": {"labels": {label: None}}})


def _deferred(namespace: str, run_id: str, master_seconds: str, **options):
    """The trigger of a deferred try whose job's master runs ``master_seconds``; ``options``
    are the operator's."""
    template = seed_template(master={SIM_DURATION: master_seconds}, worker={SIM_DURATION: "600"})
    op = support.operator(template=template, namespace=namespace, deferrable=True, **options)
    return support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", run_id))


def test_a_job_completing_while_the_watch_is_cut_before_the_deadline_is_no_timeout_with_a_stub_ti(
    proxy, admin, volcano_namespace
):
    namespace = volcano_namespace
    trigger = _deferred(namespace, "cut-at-deadline", "6", execution_timeout=timedelta(seconds=25))

    async def main() -> list[dict]:
        waiting = asyncio.create_task(support.collect_events(trigger, timeout=180))
        await asyncio.sleep(1)
        proxy.set_refuse()
        await asyncio.to_thread(proxy.reset_all)
        # The job completes meanwhile; the deadline passes with the watch still cut.
        await asyncio.to_thread(
            support.wait_until,
            lambda: (
                support.list_jobs(admin, namespace)[0]["status"]["state"]["phase"] == "Completed"
            ),
            60,
            what="the job Completed",
        )
        await asyncio.sleep(max(0.0, trigger.spec.deadline - time.time()) + 3)
        proxy.set_pass()
        return await waiting

    events = asyncio.run(main())
    assert [e["outcome"] for e in events] == ["succeeded"], events
    (job,) = support.list_jobs(admin, namespace)  # not deleted as a timed-out job
    assert job["metadata"]["uid"] == trigger.job_uid


def test_a_watch_cut_every_few_seconds_past_the_grace_still_gets_the_real_outcome_with_a_stub_ti(
    proxy, admin, volcano_namespace
):
    trigger = _deferred(volcano_namespace, "flapping", "30", watch_failure_grace=8, poll_interval=2)
    done = threading.Event()

    def cut_every_three_seconds() -> None:  # what an idle-timeout proxy does to a watch
        while not done.wait(3):
            proxy.reset_all()

    cutter = threading.Thread(target=cut_every_three_seconds, daemon=True)
    cutter.start()
    try:
        events = asyncio.run(support.collect_events(trigger, timeout=180))
    finally:
        done.set()
        cutter.join()
    assert [e["outcome"] for e in events] == ["succeeded"], events
    (job,) = support.list_jobs(admin, volcano_namespace)
    assert job["metadata"]["uid"] == trigger.job_uid
    assert job["status"]["state"]["phase"] == "Completed"

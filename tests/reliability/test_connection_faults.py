"""Connection faults between the provider and the apiserver, through a TCP fault proxy.

``test_support.faults.FaultProxy`` sits between the provider (its kubeconfig
points at the proxy) and the shared local cluster's apiserver; TLS passes through untouched.

- Resets and latency while three triggers wait: every connection is reset (RST) again and
  again; each trigger still fires once, with its job's real outcome.
- A create whose answer is lost: the request reaches the apiserver, the connection is reset
  before the answer; the hook's retry meets 409 and the operator reattaches: one job.
- A watch connection that silently dies (no RST, no FIN: a dropped route or a lost NAT
  entry): the client-side read timeout notices, the watch reconnects, the trigger fires.

HTTP answers forged in front of the apiserver (429 with Retry-After, 503) are in
``test_http_faults.py``: TLS passes through this proxy, so it cannot forge one.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from kubernetes import client

from airflow_volcano_wandb.hooks import volcano_async
from airflow_volcano_wandb.job.ownership import IDENTITY_LABEL, TaskInstanceIdentity
from airflow_volcano_wandb.wait import namespace_watch
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, failing_template, seed_template

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

DAG_ID = "avw_rel_conn_faults"


def test_resets_and_latency_while_waiting_end_with_the_right_verdicts_with_a_stub_ti(
    proxy, admin, volcano_namespace
):
    namespace = volcano_namespace
    plan = {
        "ok": (support.completing_template("6"), "succeeded"),
        "fails": (failing_template("6"), "failed"),
        "deleted": (seed_template(master={SIM_DURATION: "600"}), "deleted"),
    }
    proxy.set_latency(0.2)
    triggers = support.defer_each(plan, namespace, DAG_ID)

    async def faults() -> int:
        resets = 0
        for round_ in range(10):
            await asyncio.sleep(1.5)
            resets += await asyncio.to_thread(proxy.reset_all)
            if round_ == 2:  # someone deletes one job meanwhile (not through the proxy)
                await asyncio.to_thread(
                    client.CustomObjectsApi(admin).delete_namespaced_custom_object,
                    support.GROUP,
                    support.VERSION,
                    namespace,
                    "jobs",
                    triggers["deleted"].job_name,
                )
            proxy.set_latency(0.3 if round_ % 2 else 0.05)
        proxy.set_pass()
        return resets

    async def main():
        return await asyncio.gather(
            faults(), *(support.collect_events(t, timeout=180) for t in triggers.values())
        )

    resets, *results = asyncio.run(main())
    assert resets >= 5, resets  # the faults really hit open connections
    support.assert_one_verdict_each(plan, triggers, results)
    owners = Counter(
        j["metadata"]["labels"][IDENTITY_LABEL] for j in support.list_jobs(admin, namespace)
    )
    assert set(owners.values()) <= {1}, owners  # nothing submitted twice


def test_a_create_whose_answer_is_lost_is_not_duplicated_with_a_stub_ti(
    proxy, admin, volcano_namespace
):
    namespace = volcano_namespace
    proxy.lose_next_answer(larger_than=2000)  # the job's create; the other calls are smaller
    template = seed_template(master={SIM_DURATION: "600"})
    op = support.operator(template=template, namespace=namespace, deferrable=True)
    ti = support.StubTaskInstance(DAG_ID, "train", "lost-answer")
    trigger = support.execute_operator(op, ti)
    assert proxy.lost_answers == 1
    identity = TaskInstanceIdentity(DAG_ID, "train", "lost-answer")
    jobs = support.list_jobs(admin, namespace)
    assert [j["metadata"]["uid"] for j in jobs] == [trigger.job_uid]
    assert jobs[0]["metadata"]["labels"][IDENTITY_LABEL] == identity.digest
    assert ti.pushed["volcano_job"]["uid"] == trigger.job_uid
    secrets = client.CoreV1Api(admin).list_namespaced_secret(
        namespace, label_selector=identity.selector()
    )
    assert len(secrets.items) == 1


def test_a_silently_dead_watch_connection_is_replaced_with_a_stub_ti(
    proxy, volcano_cluster, volcano_namespace, monkeypatch
):
    # Short server-side watch timeout so the read timeout (timeout + grace) is short too.
    monkeypatch.setattr(namespace_watch, "WATCH_TIMEOUT_SECONDS", 10)
    monkeypatch.setattr(volcano_async, "WATCH_READ_GRACE", 5)
    namespace = volcano_namespace
    template = seed_template(master={SIM_DURATION: "8"}, worker={SIM_DURATION: "600"})
    op = support.operator(template=template, namespace=namespace, deferrable=True)
    trigger = support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "dead-watch"))

    async def main():
        waiting = asyncio.create_task(support.collect_events(trigger, timeout=120))
        await asyncio.sleep(3)  # the watch is established
        frozen = proxy.freeze_existing()
        started = time.monotonic()
        events = await waiting
        return frozen, time.monotonic() - started, events

    frozen, took, events = asyncio.run(main())
    assert frozen >= 1
    assert [e["outcome"] for e in events] == ["succeeded"], events
    assert took < 60, took

"""The wait never destroys training on a guess, and a PyTorch gang means all its ranks.

On the shared local cluster, the provider's connection through a TCP fault proxy:

- the watch is cut for longer than ``pending_timeout`` while the job goes from Pending to
  Running: the stale cached copy is never judged, the job is not deleted, the task succeeds;
- a seed-shaped template (``minAvailable: 1``) whose worker cannot be placed: by default the
  gang is every rank and fails by ``pending_timeout`` naming the unplaced task; with
  ``gang="template"`` the master runs alone, and ``pending_timeout`` still fails it;
- a watch refused for good (a Role without ``watch``) fails the task after
  ``watch_failure_grace`` as a lost watch, leaving the job untouched.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.exceptions import JobUnschedulableError
from airflow_volcano_wandb.wait.diagnostics import unschedulable_reason
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, job_pods, podgroups, seed_template

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

DAG_ID = "avw_rel_verdicts"
UNPLACEABLE = {"worker": {"limits": {"nvidia.com/gpu": 64}}}  # more than any node has
# The fit check would refuse such a job before Volcano saw it; "warn" (as where an autoscaler
# adds nodes) submits it, so what Volcano and the wait make of it is what these test.
WARN_ONLY = "warn"


def _events(api, namespace: str) -> list[dict]:
    """The namespace's events as the apiserver serves them (what the waiter's report reads)."""
    items = k8s.CoreV1Api(api).list_namespaced_event(namespace).items
    return [api.sanitize_for_serialization(event) for event in items]


def test_a_watch_cut_longer_than_pending_timeout_does_not_delete_a_running_job_with_a_stub_ti(
    proxy, admin, volcano_namespace
):
    namespace = volcano_namespace
    template = seed_template(master={SIM_DURATION: "30"}, worker={SIM_DURATION: "600"})
    op = support.operator(
        template=template, namespace=namespace, deferrable=True, pending_timeout=8
    )
    trigger = support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "cut"))

    async def main():
        waiting = asyncio.create_task(support.collect_events(trigger, timeout=180))
        await asyncio.sleep(0.5)  # the watch has (or is about to have) the Pending copy
        proxy.set_refuse()
        await asyncio.to_thread(proxy.reset_all)
        await asyncio.sleep(15)  # past pending_timeout, while the job starts running
        proxy.set_pass()
        return await waiting

    events = asyncio.run(main())
    assert [e["outcome"] for e in events] == ["succeeded"], events
    (job,) = support.list_jobs(admin, namespace)
    assert job["metadata"]["uid"] == trigger.job_uid
    assert job["status"]["state"]["phase"] == "Completed"


@pytest.mark.parametrize("gang", ["all_ranks", "template"])
def test_a_gang_whose_worker_cannot_be_placed_fails_by_pending_timeout_naming_it_with_a_stub_ti(
    gang, kubernetes_connection, wandb_connection, admin, volcano_namespace
):
    namespace = volcano_namespace
    template = seed_template(master={SIM_DURATION: "600"})
    assert template["spec"]["minAvailable"] == 1  # the seed's own gang
    op = support.operator(
        template=template,
        namespace=namespace,
        gang=gang,
        container_resources=UNPLACEABLE,
        pending_timeout=10,
        fit_check=WARN_ONLY,
    )
    with pytest.raises(JobUnschedulableError) as failure:
        support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", f"gang-{gang}"))
    message = str(failure.value)
    assert "pending_timeout=10s" in message and "worker 0/1" in message, message
    # Volcano's own words follow (a PodGroup condition or a scheduler event; which one
    # depends on how far the scheduler got).
    reason = message.split("): ", 1)[-1]
    assert reason and reason != message and "Volcano gave no reason" not in reason, message
    support.wait_until(
        lambda: not support.list_jobs(admin, namespace), 60, what="the unplaced job deleted"
    )


def test_the_default_gang_keeps_the_master_from_running_alone_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace
):
    namespace = volcano_namespace
    op = support.operator(
        template=seed_template(master={SIM_DURATION: "600"}),
        namespace=namespace,
        container_resources=UNPLACEABLE,
        wait_for_completion=False,
        fit_check=WARN_ONLY,
    )
    support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "no-master-alone"))
    (job,) = support.list_jobs(admin, namespace)
    assert job["spec"]["minAvailable"] == 2
    # Wait until Volcano's scheduler has tried the gang and said it cannot place it: a master
    # allowed to run alone would have been bound by that same scheduling session.
    support.wait_until(
        lambda: unschedulable_reason(podgroups(admin, namespace), _events(admin, namespace)),
        90,
        what="Volcano's word that the gang cannot be placed",
    )
    bound = [
        pod.metadata.name
        for pod in job_pods(admin, namespace, job["metadata"]["name"])
        if pod.spec.node_name
    ]
    assert bound == [], "Volcano placed part of the gang"
    (job,) = support.list_jobs(admin, namespace)
    assert job["status"]["state"]["phase"] == "Pending", job["status"]
    running = job["status"].get("running", 0)
    assert running == 0, job["status"]

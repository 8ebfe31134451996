"""A worker SIGKILLed right after the create call, before its XCom push: the retry reattaches.

Each trial forks a process that runs ``VolcanoPyTorchJobOperator.execute`` for its own task
instance (the real render, Secret, list and create calls against the local cluster) and is
SIGKILLed by a wrapper around ``VolcanoHook.create_job``:

- ``after``: the moment the create call has returned (the job exists; nothing was pushed to
  XCom, its key Secret is not created yet);
- ``during``: at a random instant 0-150 ms into the create call, or right after it returns if
  that comes first, so some creates never reach the apiserver and some are applied but their
  answer is lost.

Then the retry (try 2, deferrable: it stops where the trigger would take over) runs in the
test process. Over 50 trials: exactly one job per task instance, the retry's trigger waits on
that very job (0 duplicates), and every job on the cluster is one some retry waits on
(0 orphans). The W&B key's Secret ends up single and owned by the job, so it goes with it.

And the window this leaves, shown: a job whose submitter was SIGKILLed the moment its create
returned has no key Secret (it is created after the job, owned by it), so its pods wait in
``CreateContainerConfigError`` until the next try reattaches and creates it; then they start.
The local cluster holds back a pod whose ``secretKeyRef`` does not resolve, as a kubelet does.
"""

from __future__ import annotations

import os
import random
import signal
import threading
from collections import Counter

import pytest
from kubernetes import client

from airflow_volcano_wandb.job.ownership import IDENTITY_LABEL, TaskInstanceIdentity
from test_support import operator_tries as support

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(900)]

TRIALS = 50
DAG_ID = "avw_rel_sigkill"


def _first_try_killed(namespace: str, run_id: str, mode: str, delay: float) -> int:
    """Fork; the child runs the first try and is killed by SIGKILL; return its wait status."""
    pid = os.fork()
    if pid:
        _, status = os.waitpid(pid, 0)
        return status
    try:  # the child: never returns to pytest
        from airflow_volcano_wandb.hooks.volcano import VolcanoHook

        real_create = VolcanoHook.create_job

        def die() -> None:
            os.kill(os.getpid(), signal.SIGKILL)

        def create_then_die(self, body, ns):
            if mode == "during":
                threading.Timer(delay, die).start()
            real_create(self, body, ns)
            die()  # right after the create call: before its key Secret, before XCom

        VolcanoHook.create_job = create_then_die
        support.execute_operator(
            support.master_only_operator(namespace),
            support.StubTaskInstance(DAG_ID, "train", run_id),
        )
    finally:
        os._exit(3)  # not killed: the harness failed to kill it


def test_fifty_sigkills_after_create_leave_no_duplicate_and_no_orphan_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace
):
    namespace = volcano_namespace
    rng = random.Random(7)
    api = volcano_cluster.api_client()
    core = client.CoreV1Api(api)
    waited_on: dict[str, str] = {}  # run id -> uid the retry's trigger waits on
    found_by_retry = Counter()
    for trial in range(TRIALS):
        run_id = f"trial-{trial:02d}"
        mode = "after" if trial % 2 == 0 else "during"
        status = _first_try_killed(namespace, run_id, mode, rng.uniform(0, 0.15))
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status

        identity = TaskInstanceIdentity(DAG_ID, "train", run_id)
        before = [
            j["metadata"]["uid"]
            for j in support.list_jobs(api, namespace)
            if j["metadata"]["labels"].get(IDENTITY_LABEL) == identity.digest
        ]
        assert len(before) <= 1
        if mode == "after":
            assert len(before) == 1  # the create had returned before the kill

        retry = support.StubTaskInstance(DAG_ID, "train", run_id, try_number=2)
        trigger = support.execute_operator(support.master_only_operator(namespace), retry)
        waited_on[run_id] = trigger.job_uid
        assert retry.pushed["volcano_job"]["uid"] == trigger.job_uid
        if before:
            assert before == [trigger.job_uid]  # reattached, not resubmitted
        found_by_retry[f"{mode}/{'reattached' if before else 'submitted'}"] += 1

        mine = [
            j
            for j in support.list_jobs(api, namespace)
            if j["metadata"]["labels"].get(IDENTITY_LABEL) == identity.digest
        ]
        assert [j["metadata"]["uid"] for j in mine] == [trigger.job_uid]
        secrets = core.list_namespaced_secret(namespace, label_selector=identity.selector()).items
        assert len(secrets) == 1
        owners = secrets[0].metadata.owner_references or []
        assert [o.uid for o in owners] == [trigger.job_uid]

    jobs = support.list_jobs(api, namespace)
    by_owner = Counter(j["metadata"]["labels"][IDENTITY_LABEL] for j in jobs)
    assert len(jobs) == TRIALS and set(by_owner.values()) == {1}  # 0 duplicates
    assert {j["metadata"]["uid"] for j in jobs} == set(waited_on.values())  # 0 orphans
    assert found_by_retry["after/reattached"] == TRIALS // 2
    print("first-try outcomes:", dict(found_by_retry))
    api.close()


def test_a_job_whose_submitter_dies_after_create_waits_for_its_key_until_the_retry_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace
):
    """The window the key Secret's order leaves (it is created after its job, owned by it):
    the pods wait in ``CreateContainerConfigError`` until the next try reattaches and creates
    the Secret the job names; then they start."""
    namespace = volcano_namespace
    api = volcano_cluster.api_client()
    core = client.CoreV1Api(api)
    status = _first_try_killed(namespace, "late-key", "after", 0.0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    (job,) = support.list_jobs(api, namespace)
    name = job["metadata"]["name"]
    identity = TaskInstanceIdentity(DAG_ID, "train", "late-key")

    def waiting_for_config() -> list[str]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={name}")
        return [
            f"{pod.metadata.name}: {s.state.waiting.message}"
            for pod in pods.items
            for s in pod.status.container_statuses or []
            if s.state.waiting and s.state.waiting.reason == "CreateContainerConfigError"
        ]

    [waiting] = support.wait_until(waiting_for_config, 60, what="the master waiting for its key")
    assert "not found" in waiting, waiting
    assert core.list_namespaced_secret(namespace, label_selector=identity.selector()).items == []

    retry = support.StubTaskInstance(DAG_ID, "train", "late-key", try_number=2)
    trigger = support.execute_operator(support.master_only_operator(namespace), retry)
    assert trigger.job_uid == job["metadata"]["uid"]  # reattached, and given its key
    (secret,) = core.list_namespaced_secret(namespace, label_selector=identity.selector()).items
    assert set(secret.data) == {"api-key"}
    assert [o.uid for o in secret.metadata.owner_references] == [trigger.job_uid]
    support.wait_until(
        lambda: (
            (support.list_jobs(api, namespace)[0].get("status") or {}).get("state", {}).get("phase")
            == "Running"
        ),
        60,
        what="the job Running once its key is there",
    )
    assert waiting_for_config() == []
    api.close()

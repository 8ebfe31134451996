"""Throttling and gateway answers (429, 503) from the apiserver, and an answer that never comes.

``test_support.http_faults.HttpFaultProxy`` terminates TLS in front of the
shared local cluster's apiserver and answers chosen requests itself, exactly as a throttling
apiserver (429 with Retry-After) or a gateway (503) would:

- Submission throttled: the Secret's create and two job creates get 429 with Retry-After,
  then a job create reaches the apiserver but its answer is replaced by 503. The operator
  waits as told, retries, meets 409 and reattaches: one Secret, one job, completed.
- The key Secret's create applied but answered 503: the retry's 409 is its own Secret, not
  a race to the name, so the new job is kept and completes.
- The key Secret's create answered 503 at every attempt: the try fails, the new job is kept,
  and the next try reattaches and delivers the key.
- Waits throttled: the shared watch's lists get 429 and its watches 503, again and again,
  while a good and a failing job run. Each trigger fires once, with its job's real outcome.
- A create whose answer never comes (a connection that silently dies after the request went
  out: no RST, no FIN): the sync client's read timeout notices, the retry meets 409 and
  reattaches. Without a client-side timeout the task would hang until its execution_timeout.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from urllib.parse import urlparse

import pytest
from kubernetes import client

from airflow_volcano_wandb.hooks import volcano as volcano_hooks
from airflow_volcano_wandb.job.ownership import IDENTITY_LABEL, TaskInstanceIdentity
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, failing_template, seed_template
from test_support.faults import FaultProxy, kubeconfig_for_server
from test_support.http_faults import HttpFaultProxy

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

DAG_ID = "avw_rel_http_faults"
JOBS = r"/apis/batch\.volcano\.sh/v1alpha1/namespaces/[^/]+/jobs"


@pytest.fixture
def http_proxy(volcano_cluster, monkeypatch, tmp_path, wandb_connection):
    """An HTTP fault proxy in front of the apiserver; ``kubernetes_default`` goes through it."""
    with HttpFaultProxy(volcano_cluster.state_dir) as proxy:
        kubeconfig = kubeconfig_for_server(
            volcano_cluster.kubeconfig, proxy.url, tmp_path / "via-http-proxy.kubeconfig"
        )
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT", support.kubernetes_conn_env(kubeconfig)
        )
        yield proxy


def _owned(admin, namespace: str, identity: TaskInstanceIdentity) -> tuple[list, list]:
    jobs = [
        j
        for j in support.list_jobs(admin, namespace)
        if j["metadata"]["labels"].get(IDENTITY_LABEL) == identity.digest
    ]
    secrets = client.CoreV1Api(admin).list_namespaced_secret(
        namespace, label_selector=identity.selector()
    )
    return jobs, secrets.items


def test_a_throttled_submission_waits_as_told_and_is_not_duplicated_with_a_stub_ti(
    http_proxy, admin, volcano_namespace
):
    namespace = volcano_namespace
    http_proxy.answer("POST", r"/secrets$", status=429, retry_after=1)
    http_proxy.answer("POST", JOBS + "$", status=429, times=2, retry_after=2)
    http_proxy.answer("POST", JOBS + "$", status=503, after_forwarding=True)  # created, yet 503

    template = seed_template(master={SIM_DURATION: "2"}, worker={SIM_DURATION: "2"})
    op = support.operator(template=template, namespace=namespace, on_finish_action="keep")
    ti = support.StubTaskInstance(DAG_ID, "train", "throttled-submit")
    result = support.execute_operator(op, ti)

    assert http_proxy.pending() == 0  # every forged answer was given
    creates = [f for f in http_proxy.forged if f.method == "POST" and f.path.endswith("/jobs")]
    assert [f.status for f in creates] == [429, 429, 503]
    # Retry-After: 2 was honoured between the throttled creates.
    assert creates[1].at - creates[0].at >= 2.0, creates
    assert creates[2].at - creates[1].at >= 2.0, creates

    assert result["phase"] == "Completed"
    jobs, secrets = _owned(
        admin, namespace, TaskInstanceIdentity(DAG_ID, "train", "throttled-submit")
    )
    assert [j["metadata"]["uid"] for j in jobs] == [result["uid"]]  # the 503'd create, reattached
    assert len(secrets) == 1
    assert [o.uid for o in secrets[0].metadata.owner_references] == [result["uid"]]


def test_a_key_secret_created_under_a_lost_answer_is_not_taken_for_a_race_with_a_stub_ti(
    http_proxy, admin, volcano_namespace
):
    """The Secret's create is applied but answered 503; the retry meets its own Secret (409).
    That is no one racing us to the name: the new job is kept (not withdrawn) and runs."""
    namespace = volcano_namespace
    http_proxy.answer("POST", r"/secrets$", status=503, after_forwarding=True)
    template = seed_template(master={SIM_DURATION: "2"}, worker={SIM_DURATION: "2"})
    op = support.operator(template=template, namespace=namespace, on_finish_action="keep")
    ti = support.StubTaskInstance(DAG_ID, "train", "secret-answer-lost")
    result = support.execute_operator(op, ti)

    assert http_proxy.pending() == 0
    assert [f.status for f in http_proxy.forged] == [503]
    assert result["phase"] == "Completed"
    jobs, secrets = _owned(
        admin, namespace, TaskInstanceIdentity(DAG_ID, "train", "secret-answer-lost")
    )
    assert [j["metadata"]["uid"] for j in jobs] == [result["uid"]]
    assert [[o.uid for o in s.metadata.owner_references] for s in secrets] == [[result["uid"]]]


def test_a_key_secret_create_that_keeps_failing_leaves_the_job_to_the_next_try_with_a_stub_ti(
    http_proxy, admin, volcano_namespace
):
    """Every attempt at the Secret's create answered 503 (none applied): no verdict on the new
    job, which keeps running (never withdrawn on a guess); the task's next try reattaches to
    it, delivers the key and reports it."""
    namespace = volcano_namespace
    attempts = 6  # the hook's retries: kubernetes_api.api_retry
    http_proxy.answer("POST", r"/secrets$", status=503, times=attempts)
    template = seed_template(master={SIM_DURATION: "20"}, worker={SIM_DURATION: "20"})
    op = support.operator(template=template, namespace=namespace, on_finish_action="keep")
    with pytest.raises(client.ApiException) as failed:
        support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "secret-503"))
    assert failed.value.status == 503 and http_proxy.pending() == 0
    identity = TaskInstanceIdentity(DAG_ID, "train", "secret-503")
    jobs, secrets = _owned(admin, namespace, identity)
    assert len(jobs) == 1 and not jobs[0]["metadata"].get("deletionTimestamp"), jobs
    assert secrets == []

    op = support.operator(template=template, namespace=namespace, on_finish_action="keep")
    result = support.execute_operator(
        op, support.StubTaskInstance(DAG_ID, "train", "secret-503", try_number=2)
    )
    assert result["phase"] == "Completed" and result["uid"] == jobs[0]["metadata"]["uid"]
    jobs, secrets = _owned(admin, namespace, identity)
    assert [j["metadata"]["uid"] for j in jobs] == [result["uid"]]
    assert [[o.uid for o in s.metadata.owner_references] for s in secrets] == [[result["uid"]]]


def test_throttled_lists_and_watches_end_with_the_right_verdicts_with_a_stub_ti(
    http_proxy, volcano_namespace
):
    namespace = volcano_namespace
    # The jobs outlast the faults: the watch's backoff only resets after a stable watch, so
    # six refused lists and watches take it about half a minute to get through.
    plan = {
        "ok": (support.completing_template("50"), "succeeded"),
        "fails": (failing_template("45"), "failed"),
    }
    triggers = support.defer_each(plan, namespace, DAG_ID)

    # Only from now on: the waits' lists and watches, not the submissions above.
    http_proxy.answer("GET", JOBS + r"(?!.*watch=)", status=429, times=3, retry_after=1)
    http_proxy.answer("GET", JOBS + r"\?.*watch=", status=503, times=3)

    async def main():
        return await asyncio.gather(
            *(support.collect_events(t, timeout=180) for t in triggers.values())
        )

    results = asyncio.run(main())
    assert http_proxy.pending() == 0, http_proxy.forged
    statuses = Counter(f.status for f in http_proxy.forged)
    assert statuses == {429: 3, 503: 3}, http_proxy.forged
    support.assert_one_verdict_each(plan, triggers, results)


def test_a_create_whose_answer_never_comes_times_out_and_reattaches_with_a_stub_ti(
    admin, volcano_cluster, volcano_namespace, monkeypatch, tmp_path, wandb_connection
):
    # A short read timeout keeps the test short; the default is longer than the apiserver's.
    monkeypatch.setattr(volcano_hooks, "SYNC_CALL_TIMEOUT", (5, 5))
    namespace = volcano_namespace
    target = urlparse(volcano_cluster.server)
    with FaultProxy(target.hostname, target.port) as proxy:
        kubeconfig = kubeconfig_for_server(
            volcano_cluster.kubeconfig, proxy.url, tmp_path / "via-proxy.kubeconfig"
        )
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT", support.kubernetes_conn_env(kubeconfig)
        )
        proxy.lose_next_answer(larger_than=2000, silently=True)  # the job's create
        template = seed_template(master={SIM_DURATION: "600"})
        op = support.operator(template=template, namespace=namespace, deferrable=True)
        ti = support.StubTaskInstance(DAG_ID, "train", "silent-answer")
        trigger = support.execute_operator(op, ti)
        assert proxy.lost_answers == 1

    jobs, secrets = _owned(admin, namespace, TaskInstanceIdentity(DAG_ID, "train", "silent-answer"))
    assert [j["metadata"]["uid"] for j in jobs] == [trigger.job_uid]
    assert ti.pushed["volcano_job"]["uid"] == trigger.job_uid
    assert len(secrets) == 1

"""Retries that meet an earlier try's job in an awkward state, on the shared local cluster.

- The earlier job is being deleted (a clear or kill of the previous try; on a real cluster
  foreground deletion lasts as long as pod termination, here a finalizer holds it): the retry
  must not reattach to it (it would see it vanish and fail); it waits for it to go and
  submits afresh.
- A job of the same name owned by another task instance: the retry refuses with a message
  naming the owner, and leaves that job and its W&B key Secret alone.
- The apiserver refuses the job outright (here Volcano's webhook: no such queue): the Secret
  this try wrote for the W&B key before the create is collected, not left holding the key.
- A fixed job name (``job_name=``): the job of a failed try was reported and stays (failed
  jobs stay for inspection), so the retry's create meets it. The retry replaces it (a
  confirmed delete, then the create) and succeeds; the key Secret ends up owned by the new job.
- A fixed job name whose job someone deleted in the background (``kubectl delete vcjob``): the
  job is gone while its pods still terminate (here a finalizer holds the pod, as a real pod's
  grace period does). The retry creates the name again only once those pods are gone, since
  Volcano's controller counts a job's pods by its name.
"""

from __future__ import annotations

import threading
import time

import pytest
from kubernetes import client

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.job.ownership import (
    IDENTITY_LABEL,
    REPORTED_ANNOTATION,
    TaskInstanceIdentity,
)
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, failing_template, seed_template

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

HOLD = "reliability.airflow-volcano-wandb.io/hold"


def test_a_retry_does_not_reattach_to_a_job_being_deleted_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace
):
    namespace = volcano_namespace
    api = volcano_cluster.api_client()
    custom = client.CustomObjectsApi(api)
    first = support.execute_operator(
        support.master_only_operator(namespace),
        support.StubTaskInstance("avw_rel_edge", "train", "r1"),
    )
    name = first.job_name
    custom.patch_namespaced_custom_object(
        support.GROUP,
        support.VERSION,
        namespace,
        "jobs",
        name,
        {"metadata": {"finalizers": [HOLD]}},
    )
    custom.delete_namespaced_custom_object(
        support.GROUP,
        support.VERSION,
        namespace,
        "jobs",
        name,
        body=client.V1DeleteOptions(propagation_policy="Foreground"),
    )
    job = custom.get_namespaced_custom_object(
        support.GROUP, support.VERSION, namespace, "jobs", name
    )
    assert job["metadata"].get("deletionTimestamp")

    def release_after(delay: float) -> None:
        time.sleep(delay)
        while True:
            current = custom.get_namespaced_custom_object(
                support.GROUP, support.VERSION, namespace, "jobs", name
            )
            finalizers = [f for f in current["metadata"].get("finalizers", []) if f != HOLD]
            try:
                custom.patch_namespaced_custom_object(  # merge patch, optimistic lock
                    support.GROUP,
                    support.VERSION,
                    namespace,
                    "jobs",
                    name,
                    {
                        "metadata": {
                            "finalizers": finalizers,
                            "resourceVersion": current["metadata"]["resourceVersion"],
                        }
                    },
                )
                return
            except client.ApiException as exc:
                if exc.status == 404:
                    return
                time.sleep(0.2)

    releaser = threading.Thread(target=release_after, args=(4.0,), daemon=True)
    releaser.start()
    started = time.monotonic()
    retry = support.StubTaskInstance("avw_rel_edge", "train", "r1", try_number=2)
    second = support.execute_operator(support.master_only_operator(namespace), retry)
    releaser.join(30)
    assert time.monotonic() - started >= 3.5  # it waited for the old job to go
    assert second.job_uid != first.job_uid
    jobs = support.list_jobs(api, namespace)
    assert [j["metadata"]["uid"] for j in jobs] == [second.job_uid]
    assert not jobs[0]["metadata"].get("deletionTimestamp")
    api.close()


def test_a_job_name_taken_by_another_task_instance_is_left_alone_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace
):
    namespace = volcano_namespace
    api = volcano_cluster.api_client()
    theirs = support.execute_operator(
        support.master_only_operator(namespace, job_name="shared-name"),
        support.StubTaskInstance("avw_rel_edge", "other", "r1"),
    )
    core = client.CoreV1Api(api)
    (their_secret,) = core.list_namespaced_secret(namespace, label_selector=IDENTITY_LABEL).items
    with pytest.raises(AirflowException) as failure:
        support.execute_operator(
            support.master_only_operator(namespace, job_name="shared-name"),
            support.StubTaskInstance("avw_rel_edge", "train", "r1"),
        )
    assert "belongs to avw_rel_edge/other/r1" in str(failure.value)
    assert [j["metadata"]["uid"] for j in support.list_jobs(api, namespace)] == [theirs.job_uid]
    # This try made no job, so no key Secret; theirs (it could hold another team's key) was
    # neither rewritten nor deleted.
    (after,) = core.list_namespaced_secret(namespace, label_selector=IDENTITY_LABEL).items
    assert after.metadata.name == their_secret.metadata.name
    assert after.metadata.resource_version == their_secret.metadata.resource_version
    api.close()


def test_a_job_the_apiserver_refuses_leaves_no_key_secret_behind_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace
):
    namespace = volcano_namespace
    template = seed_template(master={SIM_DURATION: "600"})
    template["spec"]["queue"] = "no-such-queue"  # Volcano's admission webhook says no
    op = support.operator(template=template, namespace=namespace, replicas={"worker": 0})
    with pytest.raises(AirflowException) as failure:
        support.execute_operator(op, support.StubTaskInstance("avw_rel_edge", "train", "refused"))
    message = str(failure.value)
    assert message.startswith(f"Kubernetes refused the Volcano job {namespace}/"), message
    assert 'queue.scheduling.volcano.sh "no-such-queue" not found' in message, message
    assert "HTTP response headers" not in message  # the API's word, not a dump
    api = volcano_cluster.api_client()
    assert support.list_jobs(api, namespace) == []
    identity = TaskInstanceIdentity("avw_rel_edge", "train", "refused")
    core = client.CoreV1Api(api)
    # The key Secret comes only after a job exists: a refused job never had one.
    assert core.list_namespaced_secret(namespace, label_selector=identity.selector()).items == []
    api.close()


def test_a_retry_replaces_the_reported_failed_job_of_a_fixed_name_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace
):
    namespace = volcano_namespace
    api = volcano_cluster.api_client()
    fixed = {"namespace": namespace, "job_name": "fixed-name", "replicas": {"worker": 0}}
    with pytest.raises(AirflowException):
        support.execute_operator(
            support.operator(template=failing_template(after="1"), **fixed),
            support.StubTaskInstance("avw_rel_edge", "train", "fixed", try_number=1),
        )
    (failed,) = support.list_jobs(api, namespace)
    assert failed["metadata"]["annotations"][REPORTED_ANNOTATION] == "1"

    retry = support.execute_operator(
        support.operator(
            template=seed_template(master={SIM_DURATION: "1"}), on_finish_action="keep", **fixed
        ),
        support.StubTaskInstance("avw_rel_edge", "train", "fixed", try_number=2),
    )
    assert retry["name"] == "fixed-name" and retry["uid"] != failed["metadata"]["uid"]
    (job,) = support.list_jobs(api, namespace)
    assert job["metadata"]["uid"] == retry["uid"]
    assert job["status"]["state"]["phase"] == "Completed"
    identity = TaskInstanceIdentity("avw_rel_edge", "train", "fixed")
    core = client.CoreV1Api(api)

    def key_secret_owners():
        secrets = core.list_namespaced_secret(namespace, label_selector=identity.selector()).items
        return [[o.uid for o in s.metadata.owner_references or []] for s in secrets]

    support.wait_until(
        lambda: key_secret_owners() == [[retry["uid"]]], 60, what="one key Secret, the new job's"
    )
    api.close()


def test_a_retry_waits_out_the_pods_of_a_fixed_names_job_deleted_in_the_background_with_a_stub_ti(
    kubernetes_connection, wandb_connection, volcano_cluster, volcano_namespace, capfd
):
    namespace = volcano_namespace
    api = volcano_cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    first = support.execute_operator(
        support.master_only_operator(namespace, job_name="bg-deleted"),
        support.StubTaskInstance("avw_rel_edge", "train", "bg"),
    )

    def pods():
        selector = "volcano.sh/job-name=bg-deleted"
        return core.list_namespaced_pod(namespace, label_selector=selector).items

    support.wait_until(lambda: len(pods()) == 1, 60, what="the master's pod")
    (pod,) = pods()
    core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": [HOLD]}})
    custom.delete_namespaced_custom_object(
        support.GROUP,
        support.VERSION,
        namespace,
        "jobs",
        "bg-deleted",
        body=client.V1DeleteOptions(propagation_policy="Background"),
    )
    support.wait_until(
        lambda: not support.list_jobs(api, namespace), 60, what="the job gone before its pod"
    )
    support.wait_until(
        lambda: all(p.metadata.deletion_timestamp for p in pods()), 60, what="its pod terminating"
    )

    jobs_while_the_pod_terminated: list[list[str]] = []

    def release_after(delay: float) -> None:
        time.sleep(delay)
        jobs_while_the_pod_terminated.append(
            [j["metadata"]["uid"] for j in support.list_jobs(api, namespace)]
        )
        core.patch_namespaced_pod(pod.metadata.name, namespace, {"metadata": {"finalizers": None}})

    releaser = threading.Thread(target=release_after, args=(4.0,), daemon=True)
    releaser.start()
    retry = support.StubTaskInstance("avw_rel_edge", "train", "bg", try_number=2)
    second = support.execute_operator(
        support.master_only_operator(namespace, job_name="bg-deleted"), retry
    )
    releaser.join(30)
    assert jobs_while_the_pod_terminated == [[]]  # not created beside the old pod
    assert "Waiting for 1 pod(s) of an earlier Volcano job named" in capfd.readouterr().out
    assert second.job_uid != first.job_uid
    (job,) = support.list_jobs(api, namespace)
    assert job["metadata"]["uid"] == second.job_uid
    assert [p.metadata.owner_references[0].uid for p in pods()] in ([], [second.job_uid])
    api.close()

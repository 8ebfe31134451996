"""VolcanoPyTorchJobOperator and VolcanoJobSensor against the real local Volcano cluster.

Every test runs a DAG through ``dag.test()`` (or ``airflow dags test`` in a child process
when the test must kill it), and checks both the task's outcome and what is on the cluster.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from airflow_volcano_wandb.job.ownership import IDENTITY_ANNOTATION, REPORTED_ANNOTATION
from test_support.cluster_jobs import (
    SIM_DURATION,
    SIM_EXIT_CODE,
    custom,
    end_master,
    job_uids,
    list_jobs,
    list_pods,
    rerun_task,
    run_dag,
    seed_template,
    start_dag_process,
    start_task_process,
    wait_until,
    xcoms,
)

pytestmark = pytest.mark.cluster

TERMINATE_ON_FAILURE = [{"event": "PodFailed", "action": "TerminateJob"}]


def _output(capfd) -> str:
    captured = capfd.readouterr()
    return captured.out + captured.err


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
def test_job_completes_through_the_master_policy(mode, cluster, capfd):
    api, namespace = cluster
    # Workers would run for 10 minutes: only the master's TaskCompleted -> CompleteJob policy
    # can end this job in seconds.
    template = seed_template(master={SIM_DURATION: "3"}, worker={SIM_DURATION: "600"})
    dag_run, tis = run_dag(
        f"avw_test_{mode}", template=template, namespace=namespace, replicas={"worker": "2"}
    )
    out = _output(capfd)
    assert tis["train"][0] == "success", out[-5000:]
    assert "Volcano job" in out and "Completed" in out
    assert "The Volcano Job to submit:" in out and "kind: Job" in out  # shown before it runs
    job = xcoms(f"avw_test_{mode}", dag_run.run_id)["train.volcano_job"]
    job = json.loads(job) if isinstance(job, str) else job
    assert job["namespace"] == namespace and job["uid"]
    # on_finish_action="delete_succeeded": the job and every pod are gone.
    wait_until(lambda: not list_jobs(api, namespace), 60, what="job deleted")
    wait_until(lambda: not list_pods(api, namespace), 60, what="pods deleted")


@pytest.mark.parametrize(("mode", "failing_task"), [("sync", "worker"), ("deferrable", "master")])
def test_a_failing_task_fails_the_airflow_task_with_its_exit_code(
    mode, failing_task, cluster, capfd
):
    api, namespace = cluster
    annotations = {"master": {SIM_DURATION: "600"}, "worker": {SIM_DURATION: "600"}}
    annotations[failing_task] = {SIM_DURATION: "1", SIM_EXIT_CODE: "3"}
    template = seed_template(**annotations)
    # The seed's restartPolicy OnFailure restarts a crashing container in place (the local
    # cluster does what the kubelet does); Never lets the pod fail, and the job policy ends
    # the job on it.
    for task in template["spec"]["tasks"]:
        task["template"]["spec"]["restartPolicy"] = "Never"
    template["spec"]["policies"] = TERMINATE_ON_FAILURE
    _, tis = run_dag(f"avw_test_{mode}", template=template, namespace=namespace)
    out = _output(capfd)
    assert tis["train"][0] == "failed"
    assert "exited with code 3" in out, out[-5000:]
    assert f"task {failing_task}" in out
    # delete_succeeded keeps a failed job for inspection.
    jobs = list_jobs(api, namespace)
    assert len(jobs) == 1
    assert jobs[0]["status"]["state"]["phase"] in ("Terminated", "Failed", "Aborted")


@pytest.mark.parametrize("mode", ["sync", "deferrable"])
def test_an_unschedulable_gang_fails_with_volcanos_reason_and_is_deleted(mode, cluster, capfd):
    api, namespace = cluster
    template = seed_template()
    # A gang of all: minAvailable equal to the total replicas scales with them (to 10 here).
    template["spec"]["minAvailable"] = 2
    for task in template["spec"]["tasks"]:
        task["template"]["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "8"}}
    # 1 master + 9 workers x 8 GPUs = 80 GPUs; the cluster has 4 nodes x 8.
    _, tis = run_dag(
        f"avw_test_pending_{mode}", template=template, namespace=namespace, replicas={"worker": 9}
    )
    out = _output(capfd)
    assert tis["train"][0] == "failed"
    assert "Fit check: the job can never be placed as things stand" in out  # warned, submitted
    assert "placed and running within pending_timeout" in out
    assert "Insufficient nvidia.com/gpu" in out or "Unschedulable" in out, out[-5000:]
    wait_until(lambda: not list_jobs(api, namespace), 60, what="job deleted")


def test_a_completed_job_whose_outcome_was_never_reported_is_not_resubmitted(cluster):
    api, namespace = cluster
    template = seed_template(master={SIM_DURATION: "1"}, worker={SIM_DURATION: "1"})
    dag_run, tis = run_dag("avw_test_keep", template=template, namespace=namespace)
    assert tis["train"][0] == "success"
    first = job_uids(api, namespace)
    assert len(first) == 1  # on_finish_action="keep"
    # As if the try had died after the job completed, before it reported the outcome.
    (job,) = list_jobs(api, namespace)
    custom(api).patch_namespaced_custom_object(
        "batch.volcano.sh",
        "v1alpha1",
        namespace,
        "jobs",
        job["metadata"]["name"],
        {"metadata": {"annotations": {REPORTED_ANNOTATION: None}}},
    )

    rerun = rerun_task("avw_test_keep", "train", dag_run.run_id)
    assert rerun.returncode == 0, rerun.stdout[-5000:]
    assert "Completed in an earlier try; not resubmitting" in rerun.stdout
    assert job_uids(api, namespace) == first

    # Now reported: running the task again trains again (a cleared successful task).
    rerun = rerun_task("avw_test_keep", "train", dag_run.run_id)
    assert rerun.returncode == 0, rerun.stdout[-5000:]
    assert len(job_uids(api, namespace)) == 2


def test_a_killed_worker_is_followed_by_a_retry_that_reattaches(cluster, tmp_path):
    api, namespace = cluster
    # The master runs until the retry has reattached (an Airflow CLI parses the DAGs folder
    # first, which took over a minute on a loaded 2-core machine), then is ended at once.
    child = _start_long_job("avw_test_sync", tmp_path / "first.log", namespace)
    wait_until(lambda: job_uids(api, namespace), 120, what="job submitted")
    os.killpg(child.pid, signal.SIGKILL)  # the worker dies; nothing gets to clean up
    child.wait()
    (job,) = list_jobs(api, namespace)
    run_id = job["metadata"]["annotations"][IDENTITY_ANNOTATION].split("/")[2]
    reattached = f"Reattaching to running Volcano job {namespace}/{job['metadata']['name']}"

    log = tmp_path / "retry.log"
    retry = start_task_process("avw_test_sync", "train", run_id, log)

    def chose() -> bool:  # reattached, or went wrong: submitted a job of its own, or ended
        text = log.read_text()
        return reattached in text or "Submitted Volcano job" in text or retry.poll() is not None

    try:
        wait_until(chose, 600, what="the retry to reattach or submit")
        assert reattached in log.read_text(), log.read_text()[-5000:]
        end_master(api, namespace)  # the job the retry waits on completes now
        assert retry.wait(300) == 0, log.read_text()[-5000:]
    finally:
        if retry.poll() is None:
            os.killpg(retry.pid, signal.SIGKILL)
            retry.wait()
    out = log.read_text()
    assert "Submitted Volcano job" not in out
    # The retry waited on that same job to its end, then deleted it: one job ever existed.
    assert f"Volcano job {namespace}/{job['metadata']['name']} Completed" in out
    assert job_uids(api, namespace) == []


def test_sigterm_while_waiting_deletes_the_job_and_its_pods(cluster, tmp_path):
    api, namespace = cluster
    child = _start_long_job("avw_test_sync", tmp_path / "run.log", namespace)
    wait_until(lambda: list_pods(api, namespace), 120, what="pods created")
    time.sleep(2)
    os.killpg(child.pid, signal.SIGTERM)
    wait_until(
        lambda: not list_jobs(api, namespace) and not list_pods(api, namespace),
        120,  # foreground deletion: the pods' termination grace period comes first
        what="job and pods deleted after SIGTERM",
    )
    # Without a supervisor (airflow dags test) nothing escalates to SIGKILL; the task ends by
    # itself once its wait sees the job gone.
    child.wait(180)


def test_a_job_deleted_by_someone_else_fails_the_task_and_says_so(cluster, tmp_path):
    api, namespace = cluster
    log = tmp_path / "run.log"
    child = _start_long_job("avw_test_deferrable", log, namespace)
    name = wait_until(
        lambda: [j["metadata"]["name"] for j in list_jobs(api, namespace)],
        120,
        what="job submitted",
    )[0]
    time.sleep(3)
    from kubernetes import client as k8s

    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", name
    )
    child.wait(120)
    text = log.read_text()
    assert "was deleted while it was being waited on" in text, text[-5000:]
    assert "JobDeletedError" in text  # the class a retry policy matches
    assert "failed" in text.lower()


def test_submit_then_sensor(cluster, capfd):
    _, namespace = cluster
    template = seed_template(master={SIM_DURATION: "10"}, worker={SIM_DURATION: "600"})
    _, tis = run_dag("avw_test_submit_then_sense", template=template, namespace=namespace)
    out = _output(capfd)
    assert tis["train"][0] == "success" and tis["wait"][0] == "success", out[-5000:]
    # The sensor followed the master's log while it poked (it shows no tail on success).
    assert re.search(r"\[wandb-job-\w+-master-0\] \[sim\] running for 10s", out), out[-5000:]


def _start_long_job(dag_id: str, log: Path, namespace: str):
    """``airflow dags test`` of ``dag_id`` in a child process, on the seed whose ranks run
    600 s (longer than any of these tests), logging to ``log``."""
    template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    date = _fixed_date().isoformat()
    return start_dag_process(dag_id, log, date, template=template, namespace=namespace)


def _fixed_date():
    """A logical date unique to this test, so dag.test() reruns reuse the same run id."""
    import pendulum

    return pendulum.datetime(2026, 1, 1, tz="UTC").add(seconds=int(time.time() * 1000) % 10**8)

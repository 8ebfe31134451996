"""One job per intent, on the shared local cluster, through the operator's real code path.

- Clearing a successful task (a new try of the same task instance) trains again: a new job
  under a new W&B run id; the reported job is neither reused nor touched.
- Two deployments (``[volcano_wandb] deployment``) with the same DAG and run ids in one
  namespace: two jobs, two run ids, neither touches the other's.
- Clear while deferred, the next try starting at once: it adopts the job, and the old try's
  late ``on_kill`` leaves it alone; the newest try's kill deletes it. Repeated.
- The sensor deletes its job when killed (poking, or deferred: its trigger's ``on_kill``),
  when it times out and when the job overstays ``pending_timeout``: the job, its pods and the
  Secret holding the W&B key are all gone.
"""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client

from airflow_volcano_wandb.job.ownership import (
    DEPLOYMENT_LABEL,
    MANAGED_SELECTOR,
    REPORTED_ANNOTATION,
    TRY_NUMBER_ANNOTATION,
    WANDB_RUN_LABEL,
)
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, as_in_a_triggerer, seed_template

DAG_ID = "avw_rel_ownership"

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def nothing_left(admin, namespace: str, what: str) -> None:
    """Wait until the namespace holds no job, no pod and no Secret of this provider."""
    core = client.CoreV1Api(admin)

    def empty() -> bool:
        secrets = core.list_namespaced_secret(namespace, label_selector=MANAGED_SELECTOR).items
        pods = core.list_namespaced_pod(namespace).items
        return not (support.list_jobs(admin, namespace) or pods or secrets)

    support.wait_until(empty, 60, what=f"{what}: job, pods and key Secret gone")


def test_clearing_a_successful_task_trains_again_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace
):
    namespace = volcano_namespace
    op = support.operator(
        template=support.completing_template("2"), namespace=namespace, on_finish_action="keep"
    )
    first = support.execute_operator(
        op, support.StubTaskInstance(DAG_ID, "train", "r1", try_number=1)
    )
    (job,) = support.list_jobs(admin, namespace)
    assert job["metadata"]["annotations"][REPORTED_ANNOTATION] == "1"

    op = support.operator(
        template=support.completing_template("2"), namespace=namespace, on_finish_action="keep"
    )
    second = support.execute_operator(
        op, support.StubTaskInstance(DAG_ID, "train", "r1", try_number=2)
    )
    assert second["uid"] != first["uid"] and second["name"] != first["name"]
    assert second["wandb_run_id"] != first["wandb_run_id"]
    jobs = {j["metadata"]["uid"]: j for j in support.list_jobs(admin, namespace)}
    assert set(jobs) == {first["uid"], second["uid"]}  # the old result was left alone
    assert jobs[second["uid"]]["status"]["state"]["phase"] == "Completed"
    assert jobs[second["uid"]]["metadata"]["labels"][WANDB_RUN_LABEL] == second["wandb_run_id"]


def test_two_deployments_never_touch_each_others_jobs_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace, monkeypatch
):
    namespace = volcano_namespace
    template = seed_template(master={SIM_DURATION: "600"})
    results = {}
    for deployment in ("staging", "prod"):
        monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__DEPLOYMENT", deployment)
        op = support.operator(template=template, namespace=namespace, wait_for_completion=False)
        results[deployment] = support.execute_operator(
            op, support.StubTaskInstance(DAG_ID, "train", "same")
        )
    assert results["staging"]["uid"] != results["prod"]["uid"]
    assert results["staging"]["wandb_run_id"] != results["prod"]["wandb_run_id"]
    jobs = support.list_jobs(admin, namespace)
    assert sorted(j["metadata"]["labels"][DEPLOYMENT_LABEL] for j in jobs) == ["prod", "staging"]


def test_a_late_kill_of_an_older_try_never_deletes_the_job_a_newer_try_adopted_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace, monkeypatch
):
    namespace = volcano_namespace
    template = seed_template(master={SIM_DURATION: "600"})
    wrong_deletions = 0
    for round_ in range(10):
        run_id = f"adopt-{round_}"
        old = support.execute_operator(
            support.operator(template=template, namespace=namespace, deferrable=True),
            support.StubTaskInstance(DAG_ID, "train", run_id, try_number=1),
        )
        new = support.execute_operator(
            support.operator(template=template, namespace=namespace, deferrable=True),
            support.StubTaskInstance(DAG_ID, "train", run_id, try_number=2),
        )
        assert new.job_uid == old.job_uid  # reattached, not resubmitted
        for trigger in (old, new):  # each try's task was killed (cleared), as Airflow says
            as_in_a_triggerer(trigger, monkeypatch, task_left=True)
        asyncio.run(old.on_kill())  # the cleared try's on_kill arrives late
        jobs = [
            j for j in support.list_jobs(admin, namespace) if j["metadata"]["uid"] == new.job_uid
        ]
        if not jobs or jobs[0]["metadata"].get("deletionTimestamp"):
            wrong_deletions += 1
            continue
        assert jobs[0]["metadata"]["annotations"][TRY_NUMBER_ANNOTATION] == "2"
        asyncio.run(new.on_kill())  # the newest try's kill does delete it
        support.wait_until(
            lambda uid=new.job_uid: all(
                j["metadata"]["uid"] != uid for j in support.list_jobs(admin, namespace)
            ),
            60,
            what="the adopted job deleted by its own try's kill",
        )
    assert wrong_deletions == 0


def _submitted(namespace: str, run_id: str, **options) -> dict:
    """The job a try that does not wait submits, for a sensor to wait on: its master runs for
    ten minutes."""
    template = seed_template(master={SIM_DURATION: "600"})
    op = support.operator(
        template=template, namespace=namespace, wait_for_completion=False, **options
    )
    return support.execute_operator(op, support.StubTaskInstance(DAG_ID, "submit", run_id))


def test_a_killed_sensor_deletes_its_job_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace
):
    namespace = volcano_namespace
    submitted = _submitted(namespace, "sensor-kill")
    sensor = VolcanoJobSensor(
        task_id="wait", job_name=submitted["name"], namespace=namespace, poke_interval=1
    )
    ti = support.StubTaskInstance(DAG_ID, "wait", "sensor-kill")
    assert sensor.poke({"ti": ti}) is False
    core = client.CoreV1Api(admin)
    assert core.list_namespaced_secret(namespace, label_selector=MANAGED_SELECTOR).items
    sensor.on_kill()
    nothing_left(admin, namespace, "the killed sensor's job")


def test_a_kill_in_sync_mode_leaves_a_job_that_has_ended_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace
):
    """A kill stops training: the operator's (sync mode) and a poking sensor's kill delete a
    job that still runs, but leave one that has ended for the task instance to report, as the
    trigger's kill does."""
    namespace = volcano_namespace
    op = support.operator(
        template=support.completing_template("2"), namespace=namespace, wait_for_completion=False
    )
    submitted = support.execute_operator(
        op, support.StubTaskInstance(DAG_ID, "submit", "ended-kill")
    )
    sensor = VolcanoJobSensor(
        task_id="wait", job_name=submitted["name"], namespace=namespace, poke_interval=1
    )
    sensor.poke({"ti": support.StubTaskInstance(DAG_ID, "wait", "ended-kill")})

    def completed() -> bool:
        jobs = support.list_jobs(admin, namespace)
        return bool(jobs) and jobs[0]["status"]["state"]["phase"] == "Completed"

    support.wait_until(completed, 60, what="the job completed")
    op.on_kill()
    sensor.on_kill()
    (job,) = support.list_jobs(admin, namespace)
    assert job["metadata"]["uid"] == submitted["uid"]
    assert not job["metadata"].get("deletionTimestamp")


def test_a_killed_deferred_sensor_deletes_its_job_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace, monkeypatch
):
    from airflow.sdk.exceptions import TaskDeferred

    namespace = volcano_namespace
    submitted = _submitted(namespace, "deferred-sensor-kill")
    sensor = VolcanoJobSensor(
        task_id="wait",
        job_name=submitted["name"],
        job_uid=submitted["uid"],
        namespace=namespace,
        deferrable=True,
    )
    ti = support.StubTaskInstance(DAG_ID, "wait", "deferred-sensor-kill")
    with pytest.raises(TaskDeferred) as deferred:
        sensor.execute({"ti": ti, "task_instance": ti})
    trigger = deferred.value.trigger
    assert trigger.job_uid == submitted["uid"] and trigger.spec.delete_on_kill
    as_in_a_triggerer(trigger, monkeypatch, task_left=True)
    asyncio.run(trigger.on_kill())  # what the triggerer runs when the task is killed
    nothing_left(admin, namespace, "the deferred sensor's job")


@pytest.mark.parametrize("ending", ["pending_timeout", "sensor_timeout"])
def test_a_sensor_that_gives_up_deletes_its_job_with_a_stub_ti(
    ending, kubernetes_connection, wandb_connection, admin, volcano_namespace
):
    from airflow_volcano_wandb.airflow_compat import AirflowException, AirflowSensorTimeout

    namespace = volcano_namespace
    unplaceable = ending == "pending_timeout"
    submitted = _submitted(
        namespace,
        f"sensor-{ending}",
        container_resources={"worker": {"limits": {"nvidia.com/gpu": 64}}} if unplaceable else None,
        fit_check="warn",  # submit the unplaceable gang: the sensor's pending timeout is tested
    )
    sensor = VolcanoJobSensor(
        task_id="wait",
        job_name=submitted["name"],
        job_uid=submitted["uid"],
        namespace=namespace,
        poke_interval=1,
        pending_timeout=5 if unplaceable else None,
        timeout=5 if not unplaceable else 600,
        mode="poke",
    )
    ti = support.StubTaskInstance(DAG_ID, "wait", f"sensor-{ending}")
    with pytest.raises(AirflowSensorTimeout if not unplaceable else AirflowException) as ended:
        sensor.execute(support.context_for(ti))
    if unplaceable:
        assert "worker 0/1" in str(ended.value)
    nothing_left(admin, namespace, f"the sensor's job after {ending}")

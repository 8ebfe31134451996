"""Each way a job fails, produced on the real local cluster, raises its own exception class.

The failures are real Volcano outcomes: KWOK's stages play the kubelet (an OOM kill, an
eviction under node pressure, an image that cannot be pulled; see
``testing/cluster/stages/pods.yaml``), Volcano's admission webhook refuses a job, Volcano's
``PodFailed -> TerminateJob`` policy ends a job. The last two tests run a DAG whose task sets
an Airflow 3.3 ``retry_policy`` through ``dag.test()``: Airflow's own task runner evaluates
the policy against the raised class, retrying an eviction and failing an OOM kill at once.
"""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException

from airflow_volcano_wandb.exceptions import (
    ImagePullError,
    JobPreemptedError,
    JobRefusedError,
    OOMKilledError,
    TrainerExitError,
    VolcanoJobError,
)
from test_support.cluster_jobs import (
    SIM_DURATION,
    SIM_EXIT_CODE,
    list_jobs,
    run_retry_policy_dag,
    seed_template,
    xcoms,
)
from test_support.operator_tries import StubTaskInstance, execute_operator, operator

pytestmark = pytest.mark.cluster

DAG_ID = "avw_failure_classes"
EXIT_REASON = "sim.airflow-volcano-wandb.io/exit-reason"
EVICT = "sim.airflow-volcano-wandb.io/evict"
IMAGE_PULL = "sim.airflow-volcano-wandb.io/image-pull"
NODE_PRESSURE = "The node was low on resource: memory."


@pytest.fixture
def namespace(airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace):
    return volcano_namespace


def _terminating(**task_annotations: dict[str, str]) -> dict:
    """The seed, its pods not restarted and any failed pod ending the job (as a user whose
    job must fail fast would write it)."""
    template = seed_template(**task_annotations)
    for task in template["spec"]["tasks"]:
        task["template"]["spec"]["restartPolicy"] = "Never"
    template["spec"]["policies"] = [{"event": "PodFailed", "action": "TerminateJob"}]
    return template


def _fail(namespace: str, run_id: str, **kwargs) -> VolcanoJobError:
    op = operator(namespace=namespace, **kwargs)
    with pytest.raises(VolcanoJobError) as failure:
        execute_operator(op, StubTaskInstance(DAG_ID, "train", run_id))
    assert isinstance(failure.value, AirflowException)  # what callers caught before
    return failure.value


def test_a_trainer_exit_code_raises_trainer_exit_error_naming_code_task_and_pod_with_a_stub_ti(
    namespace,
):
    template = _terminating(
        master={SIM_DURATION: "1", SIM_EXIT_CODE: "3"}, worker={SIM_DURATION: "600"}
    )
    error = _fail(namespace, "exit", template=template)
    assert type(error) is TrainerExitError, error
    assert (error.exit_code, error.task) == (3, "master")
    assert error.pod.endswith("-master-0") and error.job["namespace"] == namespace
    assert "exited with code 3" in str(error)


def test_an_oom_kill_raises_oom_killed_error_with_a_stub_ti(namespace):
    template = _terminating(
        master={SIM_DURATION: "600"},
        worker={SIM_DURATION: "1", SIM_EXIT_CODE: "137", EXIT_REASON: "OOMKilled"},
    )
    error = _fail(namespace, "oom", template=template)
    assert type(error) is OOMKilledError, error
    assert (error.exit_code, error.task, error.reason) == (137, "worker", "OOMKilled")
    assert error.pod.endswith("-worker-0")


def test_an_evicted_rank_raises_job_preempted_error_with_a_stub_ti(namespace):
    # The evicted pod's container exits 137 too: the eviction, not that code, is the cause.
    template = _terminating(master={SIM_DURATION: "600"}, worker={EVICT: NODE_PRESSURE})
    error = _fail(namespace, "evict", template=template)
    assert type(error) is JobPreemptedError, error
    assert (error.task, error.reason) == ("worker", "Evicted")
    assert NODE_PRESSURE in str(error)


def test_an_image_that_cannot_be_pulled_raises_image_pull_error_with_a_stub_ti(
    namespace,
):
    template = seed_template(master={IMAGE_PULL: "ErrImagePull"}, worker={SIM_DURATION: "600"})
    error = _fail(namespace, "pull", template=template, pending_timeout=6)
    assert type(error) is ImagePullError, error
    assert (error.task, error.reason) == ("master", "ErrImagePull")
    assert "pending_timeout" in str(error) and "ErrImagePull" in str(error)


def test_a_job_volcano_refuses_raises_job_refused_error_and_nothing_is_left_with_a_stub_ti(
    namespace, volcano_cluster
):
    template = seed_template()
    template["spec"]["queue"] = "no-such-queue"  # Volcano's webhook refuses unknown queues
    error = _fail(namespace, "refused", template=template)
    assert type(error) is JobRefusedError, error
    assert "no-such-queue" in str(error) and "Nothing was submitted" in str(error)
    assert list_jobs(volcano_cluster.api_client(), namespace) == []


def _history(dag_id: str, run_id: str) -> list[tuple[int, str, str | None, float | None]]:
    """(try, state, retry_reason, retry_delay_override) of every earlier try Airflow kept."""
    from airflow.models.taskinstancehistory import TaskInstanceHistory
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.query(TaskInstanceHistory).filter_by(dag_id=dag_id, run_id=run_id)
        return sorted((h.try_number, h.state, h.retry_reason, h.retry_delay_override) for h in rows)


def test_retry_policy_retries_an_eviction_and_the_retry_succeeds(namespace, tmp_path):
    dag_run, tis, records = run_retry_policy_dag(
        tmp_path,
        template=_terminating(master={SIM_DURATION: "2"}, worker={SIM_DURATION: "600"}),
        namespace=namespace,
        first_try_annotations={EVICT: NODE_PRESSURE},  # every pod of try 1 is evicted
    )
    assert tis["train"] == ("success", 2), tis
    assert [(r["try"], r["class"], r["reason"]) for r in records] == [
        (1, "JobPreemptedError", "Evicted")
    ]
    assert _history("avw_test_retry_policy", dag_run.run_id) == [
        # Airflow keeps the retried try as failed, with the policy's reason and delay.
        (1, "failed", "preempted or apiserver lost: retry", 7.0)
    ]
    # Airflow 3.3's task state store kept try 1's run: the retry resumed it (resume_on).
    pushed = xcoms("avw_test_retry_policy", dag_run.run_id)
    assert pushed["train.resumed_from_intent"] == 1
    assert pushed["train.volcano_job"]["name"] == f"wandb-job-{pushed['train.wandb_run_id']}-r2"


def test_retry_policy_fails_an_oom_kill_at_once_despite_retries_left(namespace, tmp_path):
    oom = {SIM_DURATION: "1", SIM_EXIT_CODE: "137", EXIT_REASON: "OOMKilled"}
    _, tis, records = run_retry_policy_dag(
        tmp_path,
        template=_terminating(master=oom, worker={SIM_DURATION: "600"}),
        namespace=namespace,
    )
    assert tis["train"] == ("failed", 1), tis  # retries=2, yet no second try
    assert [(r["try"], r["class"], r["exit_code"]) for r in records] == [(1, "OOMKilledError", 137)]

"""Resume on the same run (#23): the env of the try after an interrupted one, on the cluster.

Each test runs the operator's real ``execute`` twice for one task instance, tries 1 and 2,
sharing a task state store as Airflow 3.3 keeps it across tries. Try 1 ends the way the test
names: its worker evicted under node pressure (KWOK's eviction stage, reported as
``JobPreemptedError``), its master exiting 3 (``TrainerExitError``), or, deferred, its job
deleted as the trigger's ``on_kill`` deletes it when the task is killed (nothing reported).
Try 2 submits without waiting or, after the eviction, runs its job to the end (its master
printing a trainer's resume line), and the test reads the job it created: its W&B run id,
``WANDB_RESUME`` and checkpoint directory, its intent label, and what the resume saved.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.airflow_compat import TaskDeferred
from airflow_volcano_wandb.exceptions import JobPreemptedError, TrainerExitError
from airflow_volcano_wandb.job.ownership import INTENT_LABEL
from airflow_volcano_wandb.testing.cluster.podlogs import PRINT_ENV_ANNOTATION
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, SIM_EXIT_CODE, custom, seed_template
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import API_KEY, ENTITY, PROJECT, use_wandb_connection
from tests.integration.test_checkpoints_on_cluster import CLAIM, _bound_claim, _release
from tests.integration.test_failure_classes_on_cluster import (
    EVICT,
    NODE_PRESSURE,
    _terminating,
)

pytestmark = pytest.mark.cluster

DAG_ID = "avw_resume"


@pytest.fixture
def claim(kubernetes_connection, volcano_cluster, volcano_namespace):
    api = volcano_cluster.api_client()
    core = k8s.CoreV1Api(api)
    volume = _bound_claim(core, volcano_namespace)
    yield volcano_namespace
    _release(core, volcano_namespace, volume)
    api.close()


def _execute(op, ti: support.StubTaskInstance, store: support.MemoryStore) -> Any:
    try:
        return op.execute({**support.context_for(ti), "task_state_store": store})
    except TaskDeferred as deferred:
        return deferred.trigger


def _try(
    namespace: str, run_id: str, try_number: int, store: support.MemoryStore, template, **kwargs
):
    op = support.operator(
        template=template,
        namespace=namespace,
        checkpoint_volume=CLAIM,
        pending_timeout=60,
        **kwargs,
    )
    ti = support.StubTaskInstance(DAG_ID, "train", run_id, try_number=try_number)
    return op, ti, _execute(op, ti, store)


def _master_env(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, str]:
    job = custom(api).get_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", name
    )
    (master,) = [t for t in job["spec"]["tasks"] if t["name"] == "master"]
    env = master["template"]["spec"]["containers"][0]["env"]
    return {
        "intent": job["metadata"]["labels"][INTENT_LABEL],
        **{e["name"]: e.get("value") for e in env if "value" in e},
    }


def _second_try(namespace: str, run_id: str, store: support.MemoryStore) -> tuple[dict, dict]:
    """Try 2, submitted and not waited on: its job's master env and its XComs."""
    template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    _, ti, job = _try(namespace, run_id, 2, store, template, wait_for_completion=False)
    return job, ti.pushed


def _saying(line: str, gpus: int, **task_annotations: dict[str, str]) -> dict:
    """The seed whose master prints ``line`` at start (as an env var it prints) and whose every
    pod holds ``gpus`` GPUs."""
    template = seed_template(**task_annotations)
    for task in template["spec"]["tasks"]:
        container = task["template"]["spec"]["containers"][0]
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        if task["name"] == "master":
            container["env"] = [{"name": "TRAINER_SAID", "value": line}]
            task["template"]["metadata"]["annotations"][PRINT_ENV_ANNOTATION] = "TRAINER_SAID"
    return template


def test_a_preempted_try_is_resumed_on_its_run_and_checkpoints_with_a_stub_ti(
    volcano_cluster, claim
):
    namespace, store = claim, support.MemoryStore()
    evicted = _terminating(master={SIM_DURATION: "600"}, worker={EVICT: NODE_PRESSURE})
    with pytest.raises(JobPreemptedError):
        _try(namespace, "preempted", 1, store, evicted)
    first_run = store.get("volcano_run")["run_id"]
    assert store.get("volcano_run")["cause"] == "preempted"

    # Try 2 runs to its end: its trainer says it resumed from the checkpoint of step 40, which
    # holds 12.5 s of training, on a gang of 2 pods x 2 GPUs.
    checkpoint = f"/checkpoints/{first_run}/step-000000040.pt"
    said = f"resumed from step 40 (checkpoint {checkpoint}) after 12.5 s of training"
    template = _saying(said, 2, master={SIM_DURATION: "3"}, worker={SIM_DURATION: "600"})
    _, ti, job = _try(namespace, "preempted", 2, store, template, on_finish_action="keep")
    pushed = ti.pushed
    env = _master_env(volcano_cluster.api_client(), namespace, job["name"])
    # The seed names its job after the run; the resumed job never takes the interrupted one's
    # name (Volcano's controller can lose a job recreated under a name it is cleaning up).
    assert job["name"] == f"wandb-job-{first_run}-r2"
    assert env["WANDB_RUN_ID"] == first_run and env["WANDB_RESUME"] == "must"
    assert env["AVW_CHECKPOINT_DIR"] == f"/checkpoints/{first_run}"
    assert env["AVW_RESUME_FROM"] == "latest"
    assert env["intent"] == "2"  # a new intent of the same run
    assert pushed["wandb_run_id"] == first_run and pushed["resumed_from_intent"] == 1
    assert job["resumed_from_intent"] == 1
    # Read from the master's log: the step, and 12.5 s x 4 GPUs not trained again.
    assert pushed["resumed_from_step"] == 40 and job["resumed_from_step"] == 40
    assert job["resumed_from_checkpoint"] == checkpoint
    assert pushed["resume_saved_gpu_seconds"] == 50.0 and job["resume_saved_gpu_seconds"] == 50.0


def test_a_preempted_run_that_w_and_b_never_saw_is_resumed_with_allow_with_a_stub_ti_on_the_standin(
    volcano_cluster, claim, monkeypatch
):
    """Ranks preempted before the trainer's ``wandb.init``: W&B has no run, and ``must``
    would fail the resumed trainer. Asked (online, with a key), W&B settles it: ``allow``."""
    namespace, store = claim, support.MemoryStore()
    evicted = _terminating(master={SIM_DURATION: "600"}, worker={EVICT: NODE_PRESSURE})
    with pytest.raises(JobPreemptedError):
        _try(namespace, "unseen", 1, store, evicted)
    first_run = store.get("volcano_run")["run_id"]

    with WandbStandin(api_key=API_KEY) as standin:
        use_wandb_connection(monkeypatch, "wandb_resume_standin", standin.url)
        template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
        _, ti, job = _try(
            namespace,
            "unseen",
            2,
            store,
            template,
            wait_for_completion=False,
            wandb_mode="online",
            wandb_conn_id="wandb_resume_standin",
            wandb_entity=ENTITY,
            wandb_project=PROJECT,
        )
        asked = [r.variables for r in standin.requests if r.operation == "Run"]
    env = _master_env(volcano_cluster.api_client(), namespace, job["name"])
    assert asked == [{"entity": ENTITY, "project": PROJECT, "name": first_run}]
    assert env["WANDB_RUN_ID"] == first_run and env["WANDB_RESUME"] == "allow"
    assert ti.pushed["resumed_from_intent"] == 1


def test_a_trainer_failure_starts_a_run_of_its_own_with_a_stub_ti(volcano_cluster, claim):
    namespace, store = claim, support.MemoryStore()
    failing = _terminating(
        master={SIM_DURATION: "1", SIM_EXIT_CODE: "3"}, worker={SIM_DURATION: "600"}
    )
    with pytest.raises(TrainerExitError):
        _try(namespace, "failed", 1, store, failing)
    first_run = store.get("volcano_run")["run_id"]
    assert store.get("volcano_run")["cause"] == "trainer_failure"

    job, pushed = _second_try(namespace, "failed", store)
    env = _master_env(volcano_cluster.api_client(), namespace, job["name"])
    assert env["WANDB_RUN_ID"] != first_run and env["WANDB_RESUME"] == "allow"
    assert env["AVW_CHECKPOINT_DIR"] == f"/checkpoints/{env['WANDB_RUN_ID']}"
    assert "resumed_from_intent" not in pushed


def test_a_try_killed_while_deferred_is_resumed_once_its_job_is_confirmed_gone_with_a_stub_ti(
    volcano_cluster, claim
):
    namespace, store = claim, support.MemoryStore()
    api = volcano_cluster.api_client()
    running = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    _, _, trigger = _try(namespace, "killed", 1, store, running, deferrable=True)
    first_run = store.get("volcano_run")["run_id"]
    assert store.get("volcano_run")["cause"] is None  # the triggerer reports nothing

    # What the trigger's on_kill does when the task is killed: the job goes.
    custom(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", trigger.job_name
    )

    def gone() -> bool:
        try:
            custom(api).get_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", namespace, "jobs", trigger.job_name
            )
        except k8s.ApiException as exc:
            return exc.status == 404
        return False

    support.wait_until(gone, 60, what="try 1's job to go")
    job, pushed = _second_try(namespace, "killed", store)
    env = _master_env(api, namespace, job["name"])
    # Whether its trainer had started the run is not known: allow, not must.
    assert env["WANDB_RUN_ID"] == first_run and env["WANDB_RESUME"] == "allow"
    assert env["AVW_CHECKPOINT_DIR"] == f"/checkpoints/{first_run}"
    assert pushed["resumed_from_intent"] == 1


def test_a_cleared_successful_task_trains_a_run_of_its_own_with_a_stub_ti(volcano_cluster, claim):
    """The succeeded job is deleted (``delete_succeeded``) once reported: its recorded success,
    not the job's absence, tells the next try, which must not take it for a kill."""
    namespace, store = claim, support.MemoryStore()
    quick = seed_template(master={SIM_DURATION: "2"}, worker={SIM_DURATION: "600"})
    _, _, first = _try(namespace, "cleared", 1, store, quick)
    assert store.get("volcano_run")["cause"] == "succeeded"

    job, pushed = _second_try(namespace, "cleared", store)
    env = _master_env(volcano_cluster.api_client(), namespace, job["name"])
    assert env["WANDB_RUN_ID"] != first["wandb_run_id"] and env["WANDB_RESUME"] == "allow"
    assert "resumed_from_intent" not in pushed

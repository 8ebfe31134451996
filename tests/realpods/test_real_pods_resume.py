"""Trials on real pods: a second try of a task instance replaces its first's job, or resumes
its killed training from a checkpoint on a claim or in a W&B artifact.

Marked ``real_pods``: deselected unless ``-m`` names it (``make test-real-pods``), since the
cluster must be started with the real node (``AVW_CLUSTER_REAL_NODE=1``; root, containerd).
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from airflow_volcano_wandb.exceptions import (
    TrainerExitError,
)
from airflow_volcano_wandb.job.ownership import REPORTED_ANNOTATION
from airflow_volcano_wandb.testing.cluster import image, node, placement, wandb_offline
from test_support import operator_tries as support
from test_support.cluster_jobs import job_pods, list_jobs, wait_until
from test_support.real_pods import (
    kill,
    killable_try,
    one_continuous_history,
    placed_seed,
)

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.real_pods,
    pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "quick_pod_checks"),
]


def test_a_training_killed_mid_way_resumes_from_its_checkpoint_on_the_same_run_with_a_stub_ti(
    volcano_cluster,
    volcano_namespace,
    real_node,
):
    """#23 end to end on real pods: try 1 trains (master + worker, checkpoints on a claim);
    the task is killed mid-way (its job deleted, as the trigger's kill does): every rank gets
    SIGTERM and rank 0 saves the step reached. Try 2 of the same task instance resumes the
    same W&B run from that checkpoint and completes: the run's two offline files hold one
    continuous history, every step once."""
    store = support.MemoryStore()

    def one_try(try_number: int, **kwargs: Any) -> Any:
        return killable_try(
            volcano_namespace,
            store,
            support.StubTaskInstance("avw_real_resume", "train", "killed", try_number=try_number),
            checkpoint_volume=placement.WANDB_CLAIM,
            **kwargs,
        )

    first = one_try(1, wait_for_completion=False)
    run_id = first["wandb_run_id"]
    checkpoints = real_node / run_id
    wait_until(lambda: list(checkpoints.glob("step-*.pt")), 300, what="a first checkpoint")
    kill(volcano_cluster.api_client(), volcano_namespace, first["name"])
    saved = max(int(p.name[5:14]) for p in checkpoints.glob("step-*.pt"))

    second = one_try(2, execution_timeout=timedelta(seconds=600))
    assert second["phase"] == "Completed", second
    assert second["wandb_run_id"] == run_id and second["resumed_from_intent"] == 1, second
    assert second["resumed_from_step"] == saved, second  # read from the master's log
    # The trainer said the seconds of training its checkpoint holds (else no key): on the real
    # node's CPU-only gang (no GPU limits) they saved no GPU-seconds.
    assert second["resume_saved_gpu_seconds"] == 0.0, second

    killed_file, resumed_file = wandb_offline.find_run_files(real_node, run_id)
    resumed = one_continuous_history(killed_file, resumed_file, saved)
    assert wandb_offline.summary(resumed_file)["train/steps"] == resumed[-1]


def test_a_retry_replaces_the_failed_job_of_a_fixed_name_and_trains_on_real_pods_with_a_stub_ti(
    volcano_cluster,
    volcano_namespace,
    real_node,
):
    """A fixed ``job_name`` on real pods: try 1's trainer exits 2 (a bad ``TRAIN_EPOCHS``), the
    task fails with ``TrainerExitError`` and its job stays, reported. Try 2 of the same task
    instance deletes that job (foreground), waits until it is gone, creates the same name, and
    Volcano's job controller drives the new job to ``Completed`` (a controller that still held
    the old job under the name would lose the new one: it stays ``Pending`` until the
    deadline)."""
    store = support.MemoryStore()
    template = placed_seed()
    for task in template["spec"]["tasks"]:
        task["replicas"] = 1
        # A failing rank ends the job (the seed's OnFailure would restart it in place).
        task["template"]["spec"]["restartPolicy"] = "Never"
    template["spec"]["policies"] = [{"event": "PodFailed", "action": "TerminateJob"}]

    def one_try(try_number: int, epochs: str, **kwargs: Any) -> Any:
        op = support.operator(
            namespace=volcano_namespace,
            template=template,
            job_name="fixed-real",
            image_uri=image.TRAINER_IMAGE,
            allowed_images=[image.TRAINER_IMAGE],
            env={"TRAIN_EPOCHS": epochs, "TRAIN_TRAIN_SAMPLES": "512"},
            deferrable=False,
            execution_timeout=timedelta(seconds=240),
            **kwargs,
        )
        ti = support.StubTaskInstance("avw_real_replace", "train", "fixed", try_number=try_number)
        return op.execute({**support.context_for(ti), "task_state_store": store})

    with pytest.raises(TrainerExitError) as failure:
        one_try(1, epochs="0")  # train.py refuses --epochs 0: exit 2 before any training
    assert failure.value.exit_code == 2, failure.value
    api = volcano_cluster.api_client()
    (failed,) = list_jobs(api, volcano_namespace)
    assert failed["metadata"]["annotations"][REPORTED_ANNOTATION] == "1"

    retry = one_try(2, epochs="1", on_finish_action="keep")
    assert retry["phase"] == "Completed", retry
    assert retry["name"] == "fixed-real" and retry["uid"] != failed["metadata"]["uid"], retry
    (job,) = list_jobs(api, volcano_namespace)
    assert job["metadata"]["uid"] == retry["uid"]
    assert job["status"]["state"]["phase"] == "Completed"
    pods = job_pods(api, volcano_namespace, "fixed-real")
    assert {p.metadata.owner_references[0].uid for p in pods} == {retry["uid"]}
    assert all(p.status.phase == "Succeeded" for p in pods), [p.status.phase for p in pods]


def test_a_killed_training_resumes_from_its_artifact_not_a_volume_with_a_stub_ti_on_the_standin(
    volcano_cluster,
    volcano_namespace,
    real_node,
    monkeypatch,
):
    """#23's checkpoints without a shared volume, end to end on real pods: every rank's
    ``/checkpoints`` is its pod's own ``emptyDir``, and rank 0 (online, against the W&B
    stand-in served on the pods' gateway) keeps each checkpoint as a version of the run's
    artifact. Try 1 is killed mid-way (its job deleted): rank 0 saves the step reached and
    commits it. Try 2's pods start empty: rank 0 downloads the artifact's latest and sends it
    to the worker, both resume there, and the run's history is one continuous line."""
    from test_support.wandb_standin import WandbStandin
    from test_support.wandb_support import (
        API_KEY,
        ENTITY,
        PROJECT,
        use_wandb_connection,
    )

    store = support.MemoryStore()
    standin = WandbStandin(api_key=API_KEY, host=node.GATEWAY).start()
    use_wandb_connection(monkeypatch, "wandb_artifact_standin", standin.url)

    def one_try(try_number: int, **kwargs: Any) -> Any:
        return killable_try(
            volcano_namespace,
            store,
            support.StubTaskInstance("avw_real_artifact", "train", "killed", try_number=try_number),
            checkpoint_artifact=True,
            wandb_mode="online",
            wandb_conn_id="wandb_artifact_standin",
            wandb_entity=ENTITY,
            wandb_project=PROJECT,
            **kwargs,
        )

    try:
        first = one_try(1, wait_for_completion=False)
        run_id = first["wandb_run_id"]

        def committed() -> list[int]:
            versions = standin.logged_versions(ENTITY, PROJECT, f"checkpoint-{run_id}")
            return [json.loads(v.metadata)["step"] for v in versions if v.state == "COMMITTED"]

        wait_until(committed, 300, what="a first committed checkpoint version")
        kill(volcano_cluster.api_client(), volcano_namespace, first["name"])
        saved = committed()[-1]  # the SIGTERM's save, committed within the grace period
        # W&B has the run try 1 started (the stand-in creates none by itself): try 2 asks
        # and is told WANDB_RESUME=must.
        standin.add_run(ENTITY, PROJECT, run_id, summary={})

        second = one_try(2, execution_timeout=timedelta(seconds=600))
        assert second["phase"] == "Completed", second
        assert second["wandb_run_id"] == run_id and second["resumed_from_intent"] == 1, second
        assert second["resumed_from_step"] == saved, second
        version = committed().index(saved)  # the version of the step try 1 stopped at
        assert second["resumed_from_checkpoint"] == (
            f"{ENTITY}/{PROJECT}/checkpoint-{run_id}:v{version}"
        ), second
        assert committed()[-1] > saved  # try 2 kept saving to the same artifact
    finally:
        standin.stop()

    # An online run keeps its transaction log in WANDB_DIR too (run-*, not offline-run-*).
    killed_file, resumed_file = sorted(real_node.glob(f"wandb/run-*-{run_id}/run-{run_id}.wandb"))
    one_continuous_history(killed_file, resumed_file, saved)

"""Trials on real pods: the real node of the local cluster runs the trainer image, and the
kubelet restarts, replaces and signals its ranks.

Marked ``real_pods``: deselected unless ``-m`` names it (``make test-real-pods``), since the
cluster must be started with the real node (``AVW_CLUSTER_REAL_NODE=1``; root, containerd).

Failures the operator reports: ``test_real_pods_failures.py``; retries and resumes:
``test_real_pods_resume.py``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.testing.cluster import image, placement, wandb_offline
from airflow_volcano_wandb.testing.recorder import Recorder
from test_support.cluster_jobs import create_job, custom, job_pods, run_dag, wait_until
from test_support.real_pods import (
    completed,
    placed_seed,
    pod_log,
    rank_job,
)

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods]

MANUAL = "AIRFLOW__VOLCANO_PYTORCH_MANUAL__"


def test_the_manual_dag_trains_ddp_over_gloo_on_three_real_pods(
    airflow_db,
    kubernetes_connection,
    wandb_connection,
    volcano_cluster,
    volcano_namespace,
    real_node,
    capfd,
    monkeypatch,
):
    """Master + 2 workers train for real; the task log follows the master's loss; the W&B run
    is written offline under the operator's run id; the key reaches the ranks only through
    ``secretKeyRef`` and appears in no pod spec and no log."""
    monkeypatch.setenv(MANUAL + "ALLOWED_NAMESPACES", volcano_namespace)
    monkeypatch.setenv(MANUAL + "ALLOWED_IMAGES", image.TRAINER_IMAGE)
    monkeypatch.setenv(MANUAL + "TEMPLATE", json.dumps(placed_seed()))
    monkeypatch.setenv(MANUAL + "FOLLOW_MASTER_LOG", "True")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS", "0")
    api = volcano_cluster.api_client()
    with Recorder.pods(api, volcano_namespace) as pods:
        _, tis = run_dag(
            "volcano_pytorch_manual",
            file="volcano_pytorch_manual.py",
            namespace=volcano_namespace,
            worker_replicas=2,
            image_uri=image.TRAINER_IMAGE,
            epochs=2,
        )
    out = capfd.readouterr()
    log = out.out + out.err
    assert tis == {"submit": ("success", 1), "wait": ("success", 1)}, log[-3000:]

    seen = pods.seen()
    assert {p.spec.node_name for p in seen} == {placement.NODE_NAME}
    assert len({p.metadata.name for p in seen}) == 3
    [master] = [p for p in seen if "-master-" in p.metadata.name]
    env = {e.name: e for e in master.spec.containers[0].env}
    run_id = env["WANDB_RUN_ID"].value
    key_ref = env["WANDB_API_KEY"].value_from.secret_key_ref
    assert key_ref.name and env["WANDB_API_KEY"].value is None
    # What the trainer itself printed, followed from the master into the task log.
    assert "[rank 0/3] joining gloo process group at" in log
    assert f'"WANDB_RUN_ID": "{run_id}"' in log
    assert "AVW_TRAIN_RESULT" in log and "loss" in log
    # The run, written offline by the master under the id the operator chose.
    summary = wandb_offline.summary(wandb_offline.find_run_file(real_node, run_id))
    assert summary["train/steps"] > 0 and summary["eval/loss"] > 0, summary
    # The key: never in a pod spec, never in the log.
    assert wandb_connection not in log
    assert all(wandb_connection not in json.dumps(api.sanitize_for_serialization(p)) for p in seen)


def test_a_crashing_rank_is_restarted_in_place_by_the_kubelet_under_on_failure(
    volcano_cluster, volcano_namespace, real_node
):
    """The seed's ``restartPolicy: OnFailure``: the container really exits 3, the kubelet
    restarts it in the same pod, and the second run (which finds its marker) succeeds."""
    name = "crash-once"
    marker = f"/wandb/{volcano_namespace}-crashed"
    script = (
        "import os, sys\n"
        f"if not os.path.exists({marker!r}):\n"
        f"    open({marker!r}, 'w').close(); print('crashing on purpose', flush=True)\n"
        "    sys.exit(3)\n"
        "print('second run', flush=True)\n"
        # Long enough for the test to read the restarted container's lastState.
        "import time; time.sleep(5)\n"
    )
    api = volcano_cluster.api_client()
    job = rank_job(name, volcano_namespace, script)
    for task in job["spec"]["tasks"]:
        task["replicas"] = 1 if task["name"] == "master" else 0
    job["spec"]["minAvailable"] = 1
    create_job(api, job)

    def master_status():
        pods = [p for p in job_pods(api, volcano_namespace, name) if "master" in p.metadata.name]
        statuses = pods[0].status.container_statuses if pods else None
        return statuses[0] if statuses else None

    def restarted():
        status = master_status()
        return status if status and status.last_state.terminated else None

    status = wait_until(restarted, 180, what="the master container restarted in place")
    assert status.last_state.terminated.exit_code == 3  # the crash, for real
    assert status.restart_count == 1

    wait_until(
        lambda: completed(api, volcano_namespace),
        180,
        what="the job Completed after the in-place restart",
    )
    assert master_status().state.terminated.exit_code == 0


def test_deleting_a_training_job_sends_sigterm_to_every_rank(
    volcano_cluster, volcano_namespace, real_node
):
    """What a killed task does (the operator's on_kill deletes the job): every rank's process
    receives SIGTERM from the kubelet, and records it where the test can read it."""
    name = "sigterm"
    prefix = f"/wandb/{volcano_namespace}-sigterm-"
    script = (
        "import os, signal, socket, time\n"
        "def bye(signum, frame):\n"
        f"    open({prefix!r} + socket.gethostname(), 'w').write(str(signum))\n"
        "    raise SystemExit(143)\n"
        "signal.signal(signal.SIGTERM, bye)\n"
        f"open({prefix!r} + socket.gethostname() + '.started', 'w').close()\n"
        "time.sleep(600)\n"
    )
    api = volcano_cluster.api_client()
    job = rank_job(name, volcano_namespace, script)
    for task in job["spec"]["tasks"]:
        if task["name"] == "worker":
            task["replicas"] = 2
    job["spec"]["minAvailable"] = 3
    create_job(api, job)
    pattern = f"{Path(prefix).name}*.started"
    wait_until(lambda: len(list(real_node.glob(pattern))) == 3, 180, what="3 ranks running")
    hosts = sorted(p.name.removesuffix(".started") for p in real_node.glob(pattern))

    custom(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", name
    )
    wait_until(lambda: not job_pods(api, volcano_namespace, name), 120, what="the pods gone")
    got = {h: (real_node / h).read_text() for h in hosts if (real_node / h).exists()}
    assert got == {h: "15" for h in hosts}


def test_a_worker_pod_deleted_mid_training_is_replaced_and_the_ranks_train_again(
    volcano_cluster, volcano_namespace, real_node
):
    """The seed has no policy for a deleted pod, so Volcano replaces it (same name, new pod);
    the surviving ranks' gloo calls fail, the kubelet restarts them in place (OnFailure), all
    three meet again at the master and train from the start, and the job completes."""
    name = "lose-worker"
    api = volcano_cluster.api_client()
    core = k8s.CoreV1Api(api)
    job = placed_seed()
    job["metadata"] = {"name": name, "namespace": volcano_namespace}
    for task in job["spec"]["tasks"]:
        task["replicas"] = 1 if task["name"] == "master" else 2
        container = task["template"]["spec"]["containers"][0]
        container["image"] = image.TRAINER_IMAGE
        # Long enough to lose a worker in the middle: a few seconds per epoch here.
        container["env"] = [
            *container.get("env", []),
            {"name": "TRAIN_EPOCHS", "value": "8"},
            {"name": "TRAIN_TRAIN_SAMPLES", "value": "65536"},
        ]
    job["spec"]["minAvailable"] = 3
    create_job(api, job)

    def master_log() -> str:
        try:
            return pod_log(core, volcano_namespace, f"{name}-master-0")
        except k8s.ApiException:  # not created or not started yet
            return ""

    wait_until(lambda: "epoch 1/8" in master_log(), 180, what="the first epoch trained")
    lost = core.read_namespaced_pod(f"{name}-worker-1", volcano_namespace).metadata.uid
    core.delete_namespaced_pod(f"{name}-worker-1", volcano_namespace)

    wait_until(
        lambda: completed(api, volcano_namespace),
        300,
        what="the job Completed after losing a worker",
    )
    pods = {p.metadata.name: p for p in job_pods(api, volcano_namespace, name)}
    master = pods[f"{name}-master-0"].status.container_statuses[0]
    assert master.restart_count >= 1  # its gloo peer vanished: it crashed and came back
    assert master.state.terminated.exit_code == 0
    replaced = pods.get(f"{name}-worker-1")
    assert replaced is None or replaced.metadata.uid != lost

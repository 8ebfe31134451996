"""Trials on real pods: the real node of the local cluster runs the trainer image.

Marked ``real_pods``: deselected unless ``-m`` names it (``make test-real-pods``), since the
cluster must be started with the real node (``AVW_CLUSTER_REAL_NODE=1``; root, containerd).
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from airflow_volcano_wandb.exceptions import (
    ImagePullError,
    TrainerExitError,
    TrainingStalledError,
)
from airflow_volcano_wandb.job.ownership import REPORTED_ANNOTATION
from airflow_volcano_wandb.testing.cluster import cluster as local_cluster
from airflow_volcano_wandb.testing.cluster import image, node, placement, wandb_offline
from airflow_volcano_wandb.testing.recorder import Recorder
from test_support import operator_tries as support
from test_support.cluster_jobs import SEED, custom, list_jobs, run_dag, wait_until

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods]

MANUAL = "AIRFLOW__VOLCANO_PYTORCH_MANUAL__"
#: Seconds of silence that make a stall here: the kubelet's real log, read with sinceSeconds.
STALL_TIMEOUT = 8


@pytest.fixture
def real_node(volcano_cluster, volcano_namespace) -> Path:
    """The host dir the test namespace's pods on the real node see as ``/wandb``; fails on a
    cluster without the node."""
    assert volcano_cluster.real_node, (
        "these tests need the real node: run them with AVW_CLUSTER_REAL_NODE=1 "
        "(make test-real-pods), or on a cluster started with `up --real-node`"
    )
    state_dir = volcano_cluster.state_dir
    server = json.loads((state_dir / "state.json").read_text())["server"]
    kube = local_cluster.admin_client(state_dir, server)
    return placement.wandb_dir(kube, state_dir, volcano_namespace)


def _placed_seed() -> dict[str, Any]:
    return placement.place_on_real_node(yaml.safe_load(SEED.read_text()))


def _job(name: str, namespace: str, script: str, restart: str = "OnFailure") -> dict[str, Any]:
    """The seed placed on the real node, every rank running ``python3 -c script``."""
    job = _placed_seed()
    job["metadata"] = {"name": name, "namespace": namespace}
    for task in job["spec"]["tasks"]:
        pod = task["template"]["spec"]
        pod["restartPolicy"] = restart
        for container in pod["containers"]:
            container["image"] = image.TRAINER_IMAGE
            container["command"] = ["python3", "-c", script]
    return job


def _pods(api: k8s.ApiClient, namespace: str, job: str) -> list[k8s.V1Pod]:
    selector = f"volcano.sh/job-name={job}"
    return k8s.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector).items


def _killable_try(
    namespace: str, store: support.MemoryStore, ti: support.StubTaskInstance, **kwargs: Any
) -> Any:
    """One try of a master and a worker training the example trainer on the real node (sync
    wait), long enough to kill in the middle: a few seconds an epoch there, 60 s of grace to
    save on SIGTERM; ``kwargs`` say where its checkpoints go and how it waits."""
    template = _placed_seed()
    for task in template["spec"]["tasks"]:
        task["replicas"] = 1
    op = support.operator(
        namespace=namespace,
        template=template,
        image_uri=image.TRAINER_IMAGE,
        allowed_images=[image.TRAINER_IMAGE],
        env={"TRAIN_EPOCHS": "6", "TRAIN_TRAIN_SAMPLES": "65536"},
        checkpoint_grace=60,
        deferrable=False,
        **kwargs,
    )
    return op.execute({**support.context_for(ti), "task_state_store": store})


def _kill(api: k8s.ApiClient, namespace: str, name: str) -> None:
    """Delete the job as the trigger's kill does, and wait until its pods are gone too: the
    job object goes first, and its ranks save on SIGTERM while their pods terminate."""
    custom(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", name
    )

    def gone() -> bool:
        return not list_jobs(api, namespace) and not _pods(api, namespace, name)

    wait_until(gone, 120, what="the killed job and its pods gone")


def _one_continuous_history(killed_file: Path, resumed_file: Path, saved: int) -> list[int]:
    """The steps the resumed run logged, once checked to continue the killed one's: the
    SIGTERM's save is the last step the killed try logged, so nothing is trained twice."""
    killed = [r["train/step"] for r in wandb_offline.history(killed_file) if "train/loss" in r]
    resumed = [r["train/step"] for r in wandb_offline.history(resumed_file) if "train/loss" in r]
    assert killed[-1] == saved and resumed[0] == saved + 1, (killed[-3:], resumed[:3])
    assert killed + resumed == list(range(1, resumed[-1] + 1))
    return resumed


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
    monkeypatch.setenv(MANUAL + "TEMPLATE", json.dumps(_placed_seed()))
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
    job = _job(name, volcano_namespace, script)
    for task in job["spec"]["tasks"]:
        task["replicas"] = 1 if task["name"] == "master" else 0
    job["spec"]["minAvailable"] = 1
    custom(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", job
    )

    def master_status():
        pods = [p for p in _pods(api, volcano_namespace, name) if "master" in p.metadata.name]
        statuses = pods[0].status.container_statuses if pods else None
        return statuses[0] if statuses else None

    def restarted():
        status = master_status()
        return status if status and status.last_state.terminated else None

    status = wait_until(restarted, 180, what="the master container restarted in place")
    assert status.last_state.terminated.exit_code == 3  # the crash, for real
    assert status.restart_count == 1

    def completed():
        [current] = list_jobs(api, volcano_namespace)
        return current.get("status", {}).get("state", {}).get("phase") == "Completed"

    wait_until(completed, 180, what="the job Completed after the in-place restart")
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
    job = _job(name, volcano_namespace, script)
    for task in job["spec"]["tasks"]:
        if task["name"] == "worker":
            task["replicas"] = 2
    job["spec"]["minAvailable"] = 3
    custom(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", job
    )
    pattern = f"{Path(prefix).name}*.started"
    wait_until(lambda: len(list(real_node.glob(pattern))) == 3, 180, what="3 ranks running")
    hosts = sorted(p.name.removesuffix(".started") for p in real_node.glob(pattern))

    custom(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", name
    )
    wait_until(lambda: not _pods(api, volcano_namespace, name), 120, what="the pods gone")
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
    job = _placed_seed()
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
    custom(api).create_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", job
    )

    def master_log() -> str:
        try:
            return core.read_namespaced_pod_log(f"{name}-master-0", volcano_namespace) or ""
        except k8s.ApiException:  # not created or not started yet
            return ""

    wait_until(lambda: "epoch 1/8" in master_log(), 180, what="the first epoch trained")
    lost = core.read_namespaced_pod(f"{name}-worker-1", volcano_namespace).metadata.uid
    core.delete_namespaced_pod(f"{name}-worker-1", volcano_namespace)

    def completed():
        [current] = list_jobs(api, volcano_namespace)
        return current.get("status", {}).get("state", {}).get("phase") == "Completed"

    wait_until(completed, 300, what="the job Completed after losing a worker")
    pods = {p.metadata.name: p for p in _pods(api, volcano_namespace, name)}
    master = pods[f"{name}-master-0"].status.container_statuses[0]
    assert master.restart_count >= 1  # its gloo peer vanished: it crashed and came back
    assert master.state.terminated.exit_code == 0
    replaced = pods.get(f"{name}-worker-1")
    assert replaced is None or replaced.metadata.uid != lost


def test_a_trainer_that_hangs_on_real_pods_is_failed_by_stall_timeout(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, real_node, monkeypatch
):
    """A hung collective, for real: every rank prints its start, then blocks. The kubelet's
    own log of the master answers the ``sinceSeconds`` probe with nothing, the task fails with
    ``TrainingStalledError`` naming each rank's last line, and the job is deleted."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "2")
    script = (
        "import socket, sys, time\n"
        "print(f'step 1 on {socket.gethostname()}', flush=True)\n"
        "time.sleep(900)  # blocked, as in a collective whose peer never comes\n"
    )
    template = _job("hang", volcano_namespace, script)
    del template["metadata"]["namespace"]  # the operator's namespace= places it
    for task in template["spec"]["tasks"]:
        task["replicas"] = 1
    template["spec"]["minAvailable"] = 2
    op = support.operator(
        namespace=volcano_namespace,
        template=template,
        allowed_images=[image.TRAINER_IMAGE],
        deferrable=False,
        stall_timeout=STALL_TIMEOUT,
        execution_timeout=timedelta(seconds=240),
    )
    with pytest.raises(TrainingStalledError) as failure:
        support.execute_operator(op, support.StubTaskInstance("avw_real_stall", "train", "hang"))
    error = failure.value
    assert error.task == "master" and error.running_for >= STALL_TIMEOUT, error
    text = str(error)
    assert f"no log line for at least {STALL_TIMEOUT}s" in text, text
    assert "[master-0] step 1 on " in text and "[worker-0] step 1 on " in text, text
    api = volcano_cluster.api_client()
    wait_until(lambda: not list_jobs(api, volcano_namespace), 120, what="the job deleted")


@pytest.mark.parametrize(
    ("bad_image", "reasons", "startup_timeout"),
    [
        # Nothing listens there: containerd's pull fails, the kubelet backs off (may heal).
        ("127.0.0.1:9/avw/no-such-trainer:1", ("ErrImagePull", "ImagePullBackOff"), 20),
        # No image reference at all: the kubelet never tries (fails at once).
        ("Not/An Image:1", ("InvalidImageName",), 600),
    ],
    ids=["unreachable-registry", "invalid-name"],
)
def test_a_worker_whose_image_cannot_start_on_real_pods_fails_and_frees_the_gang(
    airflow_db,
    kubernetes_connection,
    volcano_cluster,
    volcano_namespace,
    real_node,
    monkeypatch,
    bad_image,
    reasons,
    startup_timeout,
):
    """#33 on a real kubelet: the master starts and holds its slot, the worker's image cannot
    be had. Under the defaults (no pending_timeout) the task fails with ``ImagePullError``
    naming the worker's pod, its image and the kubelet's words, and the job is deleted."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "2")
    template = _job("badimage", volcano_namespace, "import time; time.sleep(900)")
    del template["metadata"]["namespace"]
    for task in template["spec"]["tasks"]:
        task["replicas"] = 1
        if task["name"] == "worker":
            task["template"]["spec"]["containers"][0]["image"] = bad_image
    template["spec"]["minAvailable"] = 2
    op = support.operator(
        namespace=volcano_namespace,
        template=template,
        allowed_images=[image.TRAINER_IMAGE, bad_image],
        deferrable=False,
        startup_timeout=startup_timeout,
        execution_timeout=timedelta(seconds=300),
    )
    with pytest.raises(ImagePullError) as failure:
        support.execute_operator(op, support.StubTaskInstance("avw_real_pull", "train", "bad"))
    error = failure.value
    assert error.task == "worker" and error.reason in reasons, error
    assert error.image == bad_image and f"with image {bad_image}" in str(error), error
    api = volcano_cluster.api_client()
    wait_until(lambda: not list_jobs(api, volcano_namespace), 120, what="the job deleted")


def test_a_training_killed_mid_way_resumes_from_its_checkpoint_on_the_same_run(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, real_node, monkeypatch
):
    """#23 end to end on real pods: try 1 trains (master + worker, checkpoints on a claim);
    the task is killed mid-way (its job deleted, as the trigger's kill does): every rank gets
    SIGTERM and rank 0 saves the step reached. Try 2 of the same task instance resumes the
    same W&B run from that checkpoint and completes: the run's two offline files hold one
    continuous history, every step once."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "2")
    store = support.MemoryStore()

    def one_try(try_number: int, **kwargs: Any) -> Any:
        return _killable_try(
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
    _kill(volcano_cluster.api_client(), volcano_namespace, first["name"])
    saved = max(int(p.name[5:14]) for p in checkpoints.glob("step-*.pt"))

    second = one_try(2, execution_timeout=timedelta(seconds=600))
    assert second["phase"] == "Completed", second
    assert second["wandb_run_id"] == run_id and second["resumed_from_intent"] == 1, second
    assert second["resumed_from_step"] == saved, second  # read from the master's log
    # The trainer said the seconds of training its checkpoint holds (else no key): on the real
    # node's CPU-only gang (no GPU limits) they saved no GPU-seconds.
    assert second["resume_saved_gpu_seconds"] == 0.0, second

    killed_file, resumed_file = wandb_offline.find_run_files(real_node, run_id)
    resumed = _one_continuous_history(killed_file, resumed_file, saved)
    assert wandb_offline.summary(resumed_file)["train/steps"] == resumed[-1]


def test_a_retry_replaces_the_failed_job_of_a_fixed_name_and_trains_on_real_pods(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, real_node, monkeypatch
):
    """A fixed ``job_name`` on real pods: try 1's trainer exits 2 (a bad ``TRAIN_EPOCHS``), the
    task fails with ``TrainerExitError`` and its job stays, reported. Try 2 of the same task
    instance deletes that job (foreground), waits until it is gone, creates the same name, and
    Volcano's job controller drives the new job to ``Completed`` (a controller that still held
    the old job under the name would lose the new one: it stays ``Pending`` until the
    deadline)."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "2")
    store = support.MemoryStore()
    template = _placed_seed()
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
    pods = _pods(api, volcano_namespace, "fixed-real")
    assert {p.metadata.owner_references[0].uid for p in pods} == {retry["uid"]}
    assert all(p.status.phase == "Succeeded" for p in pods), [p.status.phase for p in pods]


def test_a_training_killed_mid_way_resumes_from_its_wandb_artifact_without_a_shared_volume(
    airflow_db, kubernetes_connection, volcano_cluster, volcano_namespace, real_node, monkeypatch
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

    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL", "2")
    store = support.MemoryStore()
    standin = WandbStandin(api_key=API_KEY, host=node.GATEWAY).start()
    use_wandb_connection(monkeypatch, "wandb_artifact_standin", standin.url)

    def one_try(try_number: int, **kwargs: Any) -> Any:
        return _killable_try(
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
        _kill(volcano_cluster.api_client(), volcano_namespace, first["name"])
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
    _one_continuous_history(killed_file, resumed_file, saved)

"""The checkpoint volume and grace period the renderer adds, as Volcano 1.14 creates the pods.

The claim is bound to a PersistentVolume of its own before the job: Volcano's scheduler, like
kube-scheduler, places no pod whose claim is unbound. The local cluster runs no
persistentvolume-binder controller, so the test writes what that controller would (the
claim's bind-completed annotation and both objects' ``Bound`` phase), and, as it runs no
pv/pvc-protection controller either, lifts their protection finalizers once the job is gone.
KWOK's simulated pods mount nothing, so the volume's path is never read.
"""

from __future__ import annotations

import contextlib

import pytest
from kubernetes import client as k8s

from test_support.cluster_jobs import SIM_DURATION, custom, list_pods, seed_template, wait_until
from test_support.operator_tries import StubTaskInstance, execute_operator, operator

pytestmark = pytest.mark.cluster

CLAIM = "training-checkpoints"


def _bound_claim(core: k8s.CoreV1Api, namespace: str) -> str:
    """Create a claim bound to a new PersistentVolume; return the volume's name."""
    bound = {"status": {"phase": "Bound"}}
    volume = f"avw-checkpoints-{namespace}"
    common = {"access_modes": ["ReadWriteMany"], "storage_class_name": ""}
    core.create_persistent_volume(
        k8s.V1PersistentVolume(
            metadata=k8s.V1ObjectMeta(name=volume),
            spec=k8s.V1PersistentVolumeSpec(
                **common,
                capacity={"storage": "1Gi"},
                persistent_volume_reclaim_policy="Retain",
                host_path=k8s.V1HostPathVolumeSource(path=f"/tmp/{volume}"),
                claim_ref=k8s.V1ObjectReference(namespace=namespace, name=CLAIM),
            ),
        )
    )
    core.create_namespaced_persistent_volume_claim(
        namespace,
        k8s.V1PersistentVolumeClaim(
            # The scheduler takes a claim as bound once it names its volume and says so.
            metadata=k8s.V1ObjectMeta(
                name=CLAIM, annotations={"pv.kubernetes.io/bind-completed": "yes"}
            ),
            spec=k8s.V1PersistentVolumeClaimSpec(
                **common,
                volume_name=volume,
                resources=k8s.V1VolumeResourceRequirements(requests={"storage": "1Gi"}),
            ),
        ),
    )
    core.patch_persistent_volume_status(volume, bound)
    core.patch_namespaced_persistent_volume_claim_status(CLAIM, namespace, bound)
    return volume


def _release(core: k8s.CoreV1Api, namespace: str, volume: str) -> None:
    """Delete the claim and its volume, and lift the protection finalizers no controller of the
    local cluster would (else both, and the test's namespace, would stay Terminating)."""
    unprotected = {"metadata": {"finalizers": None}}
    with contextlib.suppress(k8s.ApiException):
        core.delete_namespaced_persistent_volume_claim(CLAIM, namespace)
    with contextlib.suppress(k8s.ApiException):
        core.patch_namespaced_persistent_volume_claim(CLAIM, namespace, unprotected)
    with contextlib.suppress(k8s.ApiException):
        core.delete_persistent_volume(volume)
    with contextlib.suppress(k8s.ApiException):
        core.patch_persistent_volume(volume, unprotected)


def test_every_rank_mounts_the_runs_checkpoint_directory_and_gets_the_grace_with_a_stub_ti(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    """Admitted by the apiserver and Volcano's webhook, placed by its scheduler, and every pod
    Volcano creates carries the claim, its mount, the run's own directory and the grace."""
    namespace, api = volcano_namespace, volcano_cluster.api_client()
    core = k8s.CoreV1Api(api)
    volume = _bound_claim(core, namespace)
    try:
        op = operator(
            template=seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"}),
            namespace=namespace,
            replicas={"worker": 2},
            checkpoint_volume=CLAIM,
            checkpoint_grace=45,
            wait_for_completion=False,
        )
        job = execute_operator(op, StubTaskInstance("avw_checkpoints", "train", "r1"))

        def stored() -> dict:
            return custom(api).get_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["name"]
            )

        wait_until(
            lambda: (stored().get("status") or {}).get("state", {}).get("phase") == "Running",
            120,
            what="the gang to run with its claim",
        )
        pods = list_pods(api, namespace)
        assert len(pods) == 3
        run_ids = set()
        for pod in pods:
            assert pod.spec.node_name, f"{pod.metadata.name} was not placed"
            assert pod.spec.termination_grace_period_seconds == 45
            (claim,) = [v for v in pod.spec.volumes if v.name == "avw-checkpoints"]
            assert claim.persistent_volume_claim.claim_name == CLAIM
            (container,) = pod.spec.containers
            assert any(
                m.name == "avw-checkpoints" and m.mount_path == "/checkpoints"
                for m in container.volume_mounts
            )
            env = {e.name: e.value for e in container.env}
            assert env["AVW_RESUME_FROM"] == "latest"
            run_ids.add(env["AVW_CHECKPOINT_DIR"].removeprefix("/checkpoints/"))
        # One directory for the whole job, named after its W&B run (the master's run id).
        (master,) = [p for p in pods if "-master-" in p.metadata.name]
        master_env = {e.name: e.value for e in master.spec.containers[0].env}
        assert run_ids == {master_env["WANDB_RUN_ID"]}
        custom(api).delete_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["name"]
        )
    finally:
        _release(core, namespace, volume)
        api.close()


def test_no_claim_gives_each_rank_the_runs_artifact_and_own_scratch_with_a_stub_ti_on_the_standin(
    kubernetes_connection, volcano_cluster, volcano_namespace, monkeypatch
):
    """``checkpoint_artifact=True`` on an online run: admitted and placed as Volcano 1.14
    creates the pods (no claim to bind), every pod with an ``emptyDir`` at ``/checkpoints``
    and the run's artifact, named after the master's W&B run id."""
    from test_support.wandb_standin import WandbStandin
    from test_support.wandb_support import (
        API_KEY,
        ENTITY,
        PROJECT,
        use_wandb_connection,
    )

    namespace, api = volcano_namespace, volcano_cluster.api_client()
    try:
        with WandbStandin(api_key=API_KEY) as standin:
            use_wandb_connection(monkeypatch, "wandb_artifact_standin", standin.url)
            op = operator(
                template=seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"}),
                namespace=namespace,
                replicas={"worker": 1},
                checkpoint_artifact=True,
                wait_for_completion=False,
                wandb_mode="online",
                wandb_conn_id="wandb_artifact_standin",
                wandb_entity=ENTITY,
                wandb_project=PROJECT,
            )
            job = execute_operator(op, StubTaskInstance("avw_checkpoint_artifact", "train", "r1"))

        def phase() -> str | None:
            stored = custom(api).get_namespaced_custom_object(
                "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["name"]
            )
            return (stored.get("status") or {}).get("state", {}).get("phase")

        wait_until(lambda: phase() == "Running", 120, what="the gang to run with its scratch")
        pods = list_pods(api, namespace)
        assert len(pods) == 2
        (master,) = [p for p in pods if "-master-" in p.metadata.name]
        run_id = {e.name: e.value for e in master.spec.containers[0].env}["WANDB_RUN_ID"]
        for pod in pods:
            assert pod.spec.node_name, f"{pod.metadata.name} was not placed"
            (scratch,) = [v for v in pod.spec.volumes if v.name == "avw-checkpoints"]
            assert scratch.empty_dir is not None and scratch.persistent_volume_claim is None
            env = {e.name: e.value for e in pod.spec.containers[0].env}
            assert env["AVW_CHECKPOINT_ARTIFACT"] == f"checkpoint-{run_id}"
            assert env["AVW_CHECKPOINT_DIR"] == f"/checkpoints/{run_id}"
            assert env["AVW_RESUME_FROM"] == "latest"
        custom(api).delete_namespaced_custom_object(
            "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["name"]
        )
    finally:
        api.close()

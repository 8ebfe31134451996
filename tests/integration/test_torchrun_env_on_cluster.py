"""The torchrun env and /dev/shm the renderer adds, as Volcano 1.14 really creates the pods."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.job.job_facts import JobFacts
from test_support.cluster_jobs import (
    SIM_DURATION,
    custom,
    get_job,
    job_phase,
    list_pods,
    seed_template,
    wait_until,
)
from test_support.operator_tries import StubTaskInstance, execute_operator, operator

pytestmark = pytest.mark.cluster


def test_every_rank_gets_its_node_rank_the_master_address_and_a_memory_dev_shm_with_a_stub_ti(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    namespace, api = volcano_namespace, volcano_cluster.api_client()
    op = operator(
        template=seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"}),
        namespace=namespace,
        replicas={"worker": 2},
        container_resources={"worker": {"limits": {"nvidia.com/gpu": 2}}},
        shm_size="256Mi",
        wait_for_completion=False,
    )
    job = execute_operator(op, StubTaskInstance("avw_torchrun", "train", "r1"))
    wait_until(lambda: len(list_pods(api, namespace)) == 3, 120, what="three pods")
    pods = list_pods(api, namespace)
    ranks = set()
    for pod in pods:
        (container,) = pod.spec.containers
        env = {e.name: e for e in container.env}
        # Volcano's pytorch plugin sets RANK; its hcclrank plugin the annotation that
        # PET_NODE_RANK reads, and they agree.
        rank = env["RANK"].value
        assert pod.metadata.annotations["hccl/rankIndex"] == rank, pod.metadata.name
        assert env["PET_NODE_RANK"].value_from.field_ref.field_path == (
            "metadata.annotations['hccl/rankIndex']"
        )
        assert env["PET_MASTER_ADDR"].value == env["MASTER_ADDR"].value
        assert env["PET_MASTER_PORT"].value == env["MASTER_PORT"].value
        assert env["PET_NNODES"].value == env["WORLD_SIZE"].value == "3"
        gpus = "2" if "-worker-" in pod.metadata.name else "1"
        assert env["PET_NPROC_PER_NODE"].value == gpus
        (shm,) = [v for v in pod.spec.volumes if v.name == "avw-dshm"]
        assert (shm.empty_dir.medium, shm.empty_dir.size_limit) == ("Memory", "256Mi")
        assert any(m.mount_path == "/dev/shm" for m in container.volume_mounts)
        ranks.add(rank)
    assert ranks == {"0", "1", "2"}
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["name"]
    )
    api.close()


def test_a_job_with_two_gpus_per_pod_is_admitted_and_every_pod_starts_two_processes_with_a_stub_ti(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    """2 GPUs in every rank, the master's too (one backend for all): Volcano admits and places
    the gang, each pod's env tells the image's launcher to start 2 processes, and the job's
    facts count a world of 3 pods x 2."""
    namespace, api = volcano_namespace, volcano_cluster.api_client()
    gpus = {"limits": {"nvidia.com/gpu": "2"}}
    op = operator(
        template=seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"}),
        namespace=namespace,
        replicas={"worker": 2},
        container_resources={"master": gpus, "worker": gpus},
        wait_for_completion=False,
    )
    job = execute_operator(op, StubTaskInstance("avw_two_gpus", "train", "r1"))
    wait_until(
        lambda: job_phase(api, namespace, job["name"]) == "Running", 120, what="the gang to run"
    )
    pods = list_pods(api, namespace)
    assert len(pods) == 3
    for pod in pods:
        assert pod.spec.node_name, f"{pod.metadata.name} was not placed"
        (container,) = pod.spec.containers
        assert container.resources.limits["nvidia.com/gpu"] == "2"
        env = {e.name: e.value for e in container.env}
        assert env["PET_NPROC_PER_NODE"] == "2", pod.metadata.name
        assert env["WORLD_SIZE"] == env["PET_NNODES"] == "3"  # the plugin counts pods
    stored = get_job(api, namespace, job["name"])
    assert JobFacts.from_job(stored).world_size == 6  # torch.distributed counts processes
    custom(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["name"]
    )
    api.close()


def test_a_job_rendered_for_volcano_before_hcclrank_is_admitted_and_completes_with_a_stub_ti(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    """Rendered for v1.12.2 (no hcclrank): the job names only plugins that release has, the
    webhook admits it, and it completes through the master policy; no pod reads a rank
    annotation nobody writes."""
    namespace, api = volcano_namespace, volcano_cluster.api_client()
    op = operator(
        template=seed_template(master={SIM_DURATION: "5"}, worker={SIM_DURATION: "600"}),
        namespace=namespace,
        replicas={"worker": 2},
        volcano_version="v1.12.2",
        wait_for_completion=False,
    )
    job = execute_operator(op, StubTaskInstance("avw_old_volcano", "train", "r1"))
    assert set(get_job(api, namespace, job["name"])["spec"]["plugins"]) == {"pytorch", "svc"}
    wait_until(lambda: len(list_pods(api, namespace)) == 3, 120, what="three pods")
    for pod in list_pods(api, namespace):
        (container,) = pod.spec.containers
        env = {e.name: e for e in container.env}
        assert "hccl/rankIndex" not in (pod.metadata.annotations or {}), pod.metadata.name
        assert "PET_NODE_RANK" not in env
        assert env["PET_NNODES"].value == env["WORLD_SIZE"].value == "3"
    wait_until(
        lambda: job_phase(api, namespace, job["name"]) == "Completed",
        120,
        what="the job to complete",
    )
    api.close()

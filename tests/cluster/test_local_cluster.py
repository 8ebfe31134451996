"""The local cluster is a real Kubernetes + Volcano: these tests hold it to that.

Every test runs against the processes the ``volcano_cluster`` fixture started (real
kube-apiserver, etcd, controller-manager, Volcano scheduler/controllers/webhook, KWOK).
"""

from __future__ import annotations

import copy
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from airflow_volcano_wandb.testing import cluster as local_cluster
from airflow_volcano_wandb.testing.cluster import (
    DURATION_ANNOTATION,
    EXIT_CODE_ANNOTATION,
    GPU_RESOURCE,
)
from airflow_volcano_wandb.testing.pytest_plugin import VolcanoCluster
from test_support.cluster_jobs import (
    create_job,
    custom,
    get_job,
    job_phase,
    job_pods,
    podgroups,
    seed_job,
    simple_job,
    wait_until,
)

pytestmark = pytest.mark.cluster


@pytest.fixture
def api(volcano_cluster: VolcanoCluster):
    with volcano_cluster.api_client() as api_client:
        yield api_client


def test_seed_template_runs_to_completed(api, volcano_namespace: str) -> None:
    job = seed_job(volcano_namespace, **{DURATION_ANNOTATION: "2"})
    # Only the master ends: the job can complete through the master's policy alone (with every
    # pod done at once, Volcano may go to Completed without Completing).
    worker = next(t for t in job["spec"]["tasks"] if t["name"] == "worker")
    worker["template"]["metadata"]["annotations"][DURATION_ANNOTATION] = "600"
    name = job["metadata"]["name"]
    created = create_job(api, job)

    # The mutating webhook filled in what the seed leaves out.
    spec = created["spec"]
    assert spec["queue"] == "default"
    assert "svc" in spec["plugins"], spec["plugins"]
    assert spec["plugins"]["pytorch"] == ["--master=master", "--worker=worker", "--port=23456"]
    assert spec["maxRetry"] == 3
    assert {t["name"]: t["minAvailable"] for t in spec["tasks"]} == {"master": 1, "worker": 1}

    groups = wait_until(
        lambda: [
            g
            for g in podgroups(api, volcano_namespace)
            if any(o["name"] == name for o in g["metadata"].get("ownerReferences", []))
        ],
        what="the job's PodGroup",
    )
    assert groups[0]["spec"]["minMember"] == 1
    assert groups[0]["spec"]["queue"] == "default"

    def bound() -> list[client.V1Pod] | None:
        pods = [p for p in job_pods(api, volcano_namespace, name) if p.spec.node_name]
        return pods if len(pods) == 2 else None

    pods = wait_until(bound, what="two bound pods")
    ranks = {}
    for pod in pods:
        assert pod.spec.scheduler_name == "volcano"
        assert pod.spec.node_name.startswith("kwok-gpu-node-")
        env = {e.name: e.value for e in pod.spec.containers[0].env or []}
        assert {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"} <= env.keys(), env
        assert env["MASTER_PORT"] == "23456"
        assert env["WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"].startswith(f"{name}-master-0")
        ranks[pod.metadata.labels["volcano.sh/task-spec"]] = env["RANK"]
    assert ranks == {"master": "0", "worker": "1"}

    # The master's TaskCompleted -> CompleteJob policy ends the job, via Completing.
    wait_until(
        lambda: job_phase(api, volcano_namespace, name) == "Completed",
        what="phase Completed",
    )
    final = get_job(api, volcano_namespace, name)["status"]
    history = [c["status"] for c in final["conditions"]]
    assert [p for i, p in enumerate(history) if i == 0 or history[i - 1] != p] == [
        "Pending",
        "Running",
        "Completing",
        "Completed",
    ], history


def test_webhook_defaults_min_available(api, volcano_namespace: str) -> None:
    job = seed_job(volcano_namespace)
    del job["spec"]["minAvailable"]
    job["spec"]["tasks"][1]["replicas"] = 3
    created = create_job(api, job)
    assert created["spec"]["minAvailable"] == 4  # every replica of every task


def test_duplicate_task_names_are_rejected(api, volcano_namespace: str) -> None:
    job = seed_job(volcano_namespace)
    job["spec"]["tasks"][1]["name"] = "master"
    with pytest.raises(ApiException) as caught:
        create_job(api, job)
    assert caught.value.status in (400, 422), caught.value
    body = caught.value.body or ""
    assert "admission webhook" in body and "validatejob.volcano.sh" in body, body
    assert "duplicated task name master" in body, body
    with pytest.raises(ApiException) as missing:
        get_job(api, volcano_namespace, job["metadata"]["name"])
    assert missing.value.status == 404


def test_nonzero_exit_fails_the_job(api, volcano_namespace: str) -> None:
    job = simple_job(
        volcano_namespace,
        "exits-3",
        replicas=2,
        annotations={DURATION_ANNOTATION: "1", EXIT_CODE_ANNOTATION: "3"},
    )
    create_job(api, job)
    wait_until(
        lambda: job_phase(api, volcano_namespace, "exits-3") == "Failed",
        what="phase Failed",
    )
    pods = job_pods(api, volcano_namespace, "exits-3")
    assert len(pods) == 2
    for pod in pods:
        assert pod.status.phase == "Failed"
        terminated = pod.status.container_statuses[0].state.terminated
        assert terminated.exit_code == 3
        assert terminated.reason == "Error"


def test_on_failure_pods_are_restarted_not_failed(api, volcano_namespace: str) -> None:
    # restartPolicy OnFailure: like the kubelet, KWOK restarts the container in place.
    job = simple_job(
        volcano_namespace,
        "crashloop",
        restart_policy="OnFailure",
        annotations={DURATION_ANNOTATION: "1", EXIT_CODE_ANNOTATION: "5"},
    )
    create_job(api, job)

    def restarted() -> client.V1Pod | None:
        pods = job_pods(api, volcano_namespace, "crashloop")
        if pods and pods[0].status.container_statuses:
            status = pods[0].status.container_statuses[0]
            if status.restart_count >= 1:
                return pods[0]
        return None

    pod = wait_until(restarted, 30, what="a restart")
    status = pod.status.container_statuses[0]
    assert pod.status.phase == "Running"
    assert status.last_state.terminated.exit_code == 5


def test_a_missing_secret_key_ref_holds_the_container_like_a_kubelet(
    api, volcano_namespace: str
) -> None:
    # A kubelet cannot create a container whose required secretKeyRef does not resolve: it
    # waits in CreateContainerConfigError, on its node, until the Secret appears.
    job = simple_job(volcano_namespace, "keyless", annotations={DURATION_ANNOTATION: "600"})
    container = job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]
    container["env"] = [
        {"name": "PLAIN", "value": "x"},
        {
            "name": "MAYBE",
            "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}},
        },
        {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "the-key", "key": "api-key"}}},
    ]
    create_job(api, job)

    def waiting() -> client.V1ContainerStateWaiting | None:
        pods = job_pods(api, volcano_namespace, "keyless")
        statuses = pods[0].status.container_statuses if pods else None
        return statuses[0].state.waiting if statuses and statuses[0].state.waiting else None

    state = wait_until(waiting, what="CreateContainerConfigError")
    assert state.reason == "CreateContainerConfigError"
    assert state.message == 'secret "the-key" not found'
    (pod,) = job_pods(api, volcano_namespace, "keyless")
    assert pod.spec.node_name and pod.status.phase == "Pending"  # placed: it holds its node
    assert job_phase(api, volcano_namespace, "keyless") == "Pending"

    core = client.CoreV1Api(api)
    secret = client.V1Secret(metadata=client.V1ObjectMeta(name="the-key"), string_data={"k": "v"})
    core.create_namespaced_secret(volcano_namespace, secret)

    def wrong_key() -> bool:
        state = waiting()
        return bool(state and state.message.startswith("couldn't find key api-key"))

    wait_until(wrong_key, what="the missing key named")
    core.patch_namespaced_secret("the-key", volcano_namespace, {"stringData": {"api-key": "v"}})
    wait_until(
        lambda: job_phase(api, volcano_namespace, "keyless") == "Running",
        what="Running",
    )


def _unschedulable_condition(api, ns: str) -> dict[str, Any] | None:
    for group in podgroups(api, ns):
        for cond in group.get("status", {}).get("conditions") or []:
            if cond["type"] == "Unschedulable" and cond["status"] == "True":
                return group
    return None


def test_gang_no_node_can_hold_stays_pending_unschedulable(
    api, volcano_namespace: str, volcano_cluster: VolcanoCluster
) -> None:
    # Fits the cluster's GPU total, so Volcano enqueues it and creates the pods, but every
    # pod wants one GPU more than a node has: the gang can never be placed.
    per_pod = {GPU_RESOURCE: str(volcano_cluster.gpus_per_node + 1)}
    job = simple_job(
        volcano_namespace,
        "no-fit",
        replicas=2,
        minAvailable=2,
        resources={"limits": per_pod, "requests": per_pod},
    )
    create_job(api, job)

    group = wait_until(
        lambda: _unschedulable_condition(api, volcano_namespace),
        what="PodGroup condition Unschedulable",
    )
    cond = next(c for c in group["status"]["conditions"] if c["type"] == "Unschedulable")
    assert cond["reason"] == "NotEnoughResources"
    assert "2/2 tasks in gang unschedulable" in cond["message"], cond
    assert group["status"]["phase"] in ("Pending", "Inqueue")
    time.sleep(2)  # several scheduling cycles: still nothing may be bound
    assert job_phase(api, volcano_namespace, "no-fit") == "Pending"
    pods = job_pods(api, volcano_namespace, "no-fit")
    assert len(pods) == 2
    assert not [p for p in pods if p.spec.node_name]


def test_gang_larger_than_cluster_is_never_enqueued(
    api, volcano_namespace: str, volcano_cluster: VolcanoCluster
) -> None:
    # More GPUs in total than the nodes have: Volcano's enqueue step refuses the PodGroup,
    # so it stays Pending without pods, and says why in an "Unschedulable" event.
    total = volcano_cluster.nodes * volcano_cluster.gpus_per_node
    replicas = volcano_cluster.nodes + 1
    per_pod = {GPU_RESOURCE: str(volcano_cluster.gpus_per_node)}
    assert replicas * volcano_cluster.gpus_per_node > total
    job = simple_job(
        volcano_namespace,
        "too-big",
        replicas=replicas,
        minAvailable=replicas,
        resources={"limits": per_pod, "requests": per_pod},
    )
    create_job(api, job)
    core = client.CoreV1Api(api)

    def unschedulable_event() -> list[Any] | None:
        events = core.list_namespaced_event(volcano_namespace).items
        return [
            e
            for e in events
            if e.involved_object.kind == "PodGroup" and e.reason == "Unschedulable"
        ] or None

    events = wait_until(unschedulable_event, what="an Unschedulable PodGroup event")
    assert any(GPU_RESOURCE in (e.message or "") for e in events), [e.message for e in events]
    groups = podgroups(api, volcano_namespace)
    assert len(groups) == 1
    assert groups[0]["status"]["phase"] == "Pending"
    assert job_phase(api, volcano_namespace, "too-big") == "Pending"
    assert not job_pods(api, volcano_namespace, "too-big")


def test_deleting_a_job_deletes_its_pods(api, volcano_namespace: str) -> None:
    create_job(
        api,
        simple_job(
            volcano_namespace, "to-delete", replicas=2, annotations={DURATION_ANNOTATION: "600"}
        ),
    )
    wait_until(
        lambda: (
            len(
                [
                    p
                    for p in job_pods(api, volcano_namespace, "to-delete")
                    if p.status.phase == "Running"
                ]
            )
            == 2
        ),
        what="two running pods",
    )
    assert podgroups(api, volcano_namespace)

    custom(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", volcano_namespace, "jobs", "to-delete"
    )
    wait_until(
        lambda: not job_pods(api, volcano_namespace, "to-delete"),
        what="pods gone",
    )
    # The PodGroup is only owned by the job, so only the garbage collector can remove it.
    wait_until(lambda: not podgroups(api, volcano_namespace), what="PodGroup gone")


def test_pod_logs_readable_and_followable(api, volcano_namespace: str) -> None:
    job = seed_job(volcano_namespace, **{DURATION_ANNOTATION: "3"})
    name = job["metadata"]["name"]
    create_job(api, job)
    core = client.CoreV1Api(api)
    master = f"{name}-master-0"
    wait_until(
        lambda: any(
            p.metadata.name == master and p.status.phase == "Running"
            for p in job_pods(api, volcano_namespace, name)
        ),
        what="master running",
    )

    text = core.read_namespaced_pod_log(master, volcano_namespace, container="master")
    assert (
        f"pod {volcano_namespace}/{master} container master started on node kwok-gpu-node-" in text
    ), text
    assert "task=master RANK=0 WORLD_SIZE=2" in text, text

    stream = core.read_namespaced_pod_log(
        master,
        volcano_namespace,
        container="master",
        follow=True,
        _preload_content=False,
        _request_timeout=30,
    )
    seen: list[str] = []
    try:
        for chunk in stream.stream(amt=256):
            seen.extend(chunk.decode().splitlines())
            if any("exited with code 0" in line for line in seen):
                break
    finally:
        stream.release_conn()
    assert any("exited with code 0" in line for line in seen), seen
    assert seen[0].startswith("[sim] pod "), seen


def test_up_is_a_no_op_on_a_running_cluster(volcano_cluster: VolcanoCluster) -> None:
    before = local_cluster.status(volcano_cluster.state_dir)
    assert before["running"]
    info = local_cluster.up(volcano_cluster.state_dir)
    after = local_cluster.status(volcano_cluster.state_dir)
    assert info.kubeconfig == volcano_cluster.kubeconfig
    assert {k: v["pid"] for k, v in after["components"].items()} == {
        k: v["pid"] for k, v in before["components"].items()
    }
    assert copy.deepcopy(after["server"]) == volcano_cluster.server

"""The manual DAG under KubernetesExecutor, Airflow's tasks and triggerer in pods of the chart's
identities, training DDP on the real node (issue 54, goal 2).

``tests/e2e/kubernetes_executor.py`` runs Airflow as the Helm chart would on the local
cluster: the API server, the scheduler (KubernetesExecutor, the pod template below) and the DAG
processor as host processes, every task in a pod of the Airflow image built here as
``airflow-worker``, the triggerer in a pod as ``airflow-triggerer``, both ServiceAccounts bound
only by ``docker/k8s/rbac-helm-binding.example.yaml`` (rbac.yaml's Role in the jobs'
namespace) and docs/helm.md's binding of the optional fit check's ClusterRole, with
``kubernetes_default`` as ``in_cluster: true``. The manual DAG is triggered through the REST
API with the form's params (two worker replicas, 0 GPUs, the trainer image); the job's three
ranks train over gloo on the real node. The wait task waits its 15 s ``defer_after`` window in
its pod, defers to the triggerer pod, and resumes in a fresh pod when the trigger fires.

Under the deferred wait, the triggerer pod is deleted as a rollout or a node drain deletes it
(SIGTERM, then its grace period) and the scheduler is restarted; the triggerer pod is then
created again, as the chart's StatefulSet would. A handover is no kill: the job must be left
running (not deleted, not submitted again) for the new triggerer, which takes the trigger over.

Any request of the pods the apiserver refused (a Forbidden of the chart's identities, a 401
from the pods' addresses) fails the trial, named by verb and resource from the audit log.

Marked ``long`` and ``real_pods``: ``make test-kubernetes-executor`` (a cluster with the real
node and the audit log; or ``AVW_CLUSTER_STATE_DIR`` naming one running so).
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from airflow_volcano_wandb.testing.cluster import image, placement, wandb_offline
from airflow_volcano_wandb.testing.recorder import Recorder
from test_support.real_pods import pod_log
from tests.e2e import kubernetes_executor as kx
from tests.e2e.airflow_stack import REPO, wait_for
from tests.realpods import in_cluster_identity as chart

DAG_ID = "volcano_pytorch_manual"
ARTIFACTS = REPO / "test-artifacts" / "kubernetes-executor"
#: Enough epochs that the job still trains once the wait task's pod has started and waited out
#: its window, so the wait defers (0.12 s an epoch on an idle node, 0.75 s at load 17; the
#: wait deferred 30 s after the job's creation at load 17), and once the triggerer pod has been
#: replaced under the wait (500 epochs took about 3 minutes in this trial).
EPOCHS = 1000
MANUAL = "AIRFLOW__VOLCANO_PYTORCH_MANUAL__"

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.real_pods,
    pytest.mark.long,
    pytest.mark.timeout(1800),
]


def test_the_manual_dag_under_kubernetes_executor_trains_ddp_across_a_replaced_triggerer_pod(
    volcano_cluster, volcano_namespace, real_node, tmp_path
):
    assert volcano_cluster.audit_log is not None, "start the cluster with AVW_CLUSTER_AUDIT_LOG=1"
    started, started_at = time.monotonic(), time.time()
    jobs_ns, airflow_ns = volcano_namespace, volcano_cluster.create_namespace("airflow")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    template = placement.place_on_real_node(
        yaml.safe_load((REPO / "dags" / "templates" / "volcano-pytorch-manual.yaml").read_text())
    )
    stack = binding = None
    pod_logs: dict[str, str] = {}
    with volcano_cluster.api_client() as api:
        core = k8s.CoreV1Api(api)
        try:
            airflow_image = chart.load_airflow_image(volcano_cluster.state_dir)
            chart.bind_like_the_chart(api, jobs_ns, airflow_ns)
            binding = chart.bind_fit_check_like_the_docs(api, airflow_ns, "KubernetesExecutor")
            stack = kx.KubernetesExecutorStack(
                home=tmp_path / "home",
                log_dir=ARTIFACTS / "logs",
                kubeconfig=volcano_cluster.kubeconfig,
                wandb_conn={"conn_type": "wandb", "extra": {"entity": "k8s", "project": "exec"}},
                airflow_namespace=airflow_ns,
                jobs_namespace=jobs_ns,
                image=airflow_image,
                extra_env={
                    # The deployment's settings of the manual DAG: the jobs' namespace, the
                    # trainer image, the DAG's own template placed on the real node.
                    MANUAL + "ALLOWED_NAMESPACES": jobs_ns,
                    MANUAL + "ALLOWED_IMAGES": image.TRAINER_IMAGE,
                    MANUAL + "DEFAULT_IMAGE": image.TRAINER_IMAGE,
                    MANUAL + "TEMPLATE": json.dumps(template),
                    MANUAL + "FOLLOW_MASTER_LOG": "True",
                    "WANDB_MODE": "offline",
                },
            )
            stack.write_pod_template()
            stack.start(timeout=600)
            _start_triggerer(core, stack, airflow_ns)
            wait_for(lambda: stack.api("GET", f"/dags/{DAG_ID}"), 300, f"DAG {DAG_ID}", interval=2)
            stack.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
            up_after = time.monotonic() - started
            conf = {
                "worker_replicas": 2,
                "gpus_per_worker": 0,
                "image_uri": image.TRAINER_IMAGE,
                "epochs": EPOCHS,
                "namespace": jobs_ns,
            }
            run_id = f"k8s-exec-{uuid.uuid4().hex[:8]}"
            restarted: dict[str, Any] = {}

            def restart_under_the_wait() -> None:
                """The triggerer pod deleted, the scheduler restarted, the pod created again."""
                old = core.read_namespaced_pod(kx.TRIGGERER_POD, airflow_ns)
                restarted["ip"] = old.status.pod_ip
                pod_logs["airflow-triggerer-replaced"] = pod_log(core, airflow_ns, kx.TRIGGERER_POD)
                core.delete_namespaced_pod(kx.TRIGGERER_POD, airflow_ns)
                wait_for(lambda: _gone(core, airflow_ns), 180, "the triggerer pod to go")
                restarted["job"] = _the_job(api, jobs_ns)  # as the old pod's trigger left it
                stack.restart("scheduler")
                _start_triggerer(core, stack, airflow_ns)

            with Recorder.pods(api, jobs_ns) as ranks, Recorder.jobs(api, jobs_ns) as jobs:
                stack.trigger(DAG_ID, run_id, conf)
                seen = kx.follow(
                    stack, DAG_ID, run_id, timeout=1200, once_served=restart_under_the_wait
                )
            task_pods = kx.ended_task_pods(core, airflow_ns, timeout=120)
            (ARTIFACTS / "wait-log-while-deferred.json").write_text(
                json.dumps(seen.lines_while_deferred, indent=1)
            )
            for pod in [*task_pods, core.read_namespaced_pod(kx.TRIGGERER_POD, airflow_ns)]:
                pod_logs[pod.metadata.name] = pod_log(core, airflow_ns, pod.metadata.name)
            for name, text in pod_logs.items():
                (ARTIFACTS / f"{name}.log").write_text(text)
            triggerer = core.read_namespaced_pod(kx.TRIGGERER_POD, airflow_ns)
        finally:
            if stack is not None:
                stack.stop()
            if binding is not None:
                k8s.RbacAuthorizationV1Api(api).delete_cluster_role_binding(binding)
            volcano_cluster.delete_namespace(airflow_ns)
    took = time.monotonic() - started
    print(f"Airflow up in {up_after:.0f}s; the DAG run took {seen.seconds:.0f}s; all {took:.0f}s")
    print("wait states:", seen.wait_states)
    blocked = [
        float(seconds)
        for name, text in pod_logs.items()
        if name.startswith(kx.TRIGGERER_POD)
        for seconds in re.findall(r"async thread was blocked for ([\d.]+) seconds", text)
    ]
    longest = max(blocked, default=0.0)
    print(f"the triggerers' event loops blocked {len(blocked)} times, longest {longest} s")
    assert seen.dag_run["state"] == "success", (seen.dag_run, _tails(pod_logs))

    # Every task ran in a pod of the Airflow image as airflow-worker on the real node; the wait
    # task in two: the one that deferred, then a fresh one that resumed it.
    pods: dict[str, list[k8s.V1Pod]] = {}
    for pod in sorted(task_pods, key=lambda p: p.metadata.creation_timestamp):
        pods.setdefault(pod.metadata.labels["task_id"], []).append(pod)
    assert {t: len(p) for t, p in pods.items()} == {"submit": 1, "wait": 2}, pods.keys()
    for pod in task_pods:
        assert pod.spec.service_account_name == kx.WORKER_ACCOUNT, pod.metadata.name
        assert pod.spec.node_name == placement.NODE_NAME, pod.metadata.name
        assert pod.spec.containers[0].image == airflow_image, pod.spec.containers[0].image
        assert pod.status.phase == "Succeeded", (pod.metadata.name, pod.status.phase)
    deferring, resuming = (pod_logs[p.metadata.name] for p in pods["wait"])
    assert "DEFERRED" in deferring, deferring[-3000:]
    (job,) = jobs.seen()
    name = f"{jobs_ns}/{job['metadata']['name']}"
    assert f"Volcano job {name} Completed" in resuming, resuming[-3000:]
    first_ended = pods["wait"][0].status.container_statuses[0].state.terminated.finished_at
    assert pods["wait"][1].metadata.creation_timestamp >= first_ended.replace(microsecond=0)

    # It deferred to the triggerer pod, whose log server served the trigger's lines meanwhile;
    # the pod replaced under the wait handed the trigger over to the new one, which served
    # them in turn and fired it. The task stayed deferred throughout.
    assert "deferred" in seen.wait_states and seen.wait_states[-1] == "success", seen.wait_states
    assert seen.wait_states.count("deferred") == 1, seen.wait_states
    held = [ti["triggerer_job"] for ti in seen.deferred_tis]
    assert [t["hostname"] for t in held] == [restarted["ip"], triggerer.status.pod_ip], held
    assert held[0]["id"] != held[1]["id"], held
    for t in held:
        assert seen.served(t["id"]), seen.lines_while_deferred.get(t["id"], [])[-40:]
    assert triggerer.spec.service_account_name == kx.TRIGGERER_ACCOUNT
    assert triggerer.status.phase == "Running", triggerer.status

    # The handover was no kill: once the old pod was gone, the job it waited on still trained,
    # not being deleted; the job was never submitted again, nor deleted by the triggerer.
    left = restarted["job"]
    assert left["metadata"]["uid"] == job["metadata"]["uid"], left["metadata"]
    assert "deletionTimestamp" not in left["metadata"], left["metadata"]
    assert left["status"]["state"]["phase"] == "Running", left["status"]

    # The job trained DDP on three real pods and completed; its W&B run was written offline.
    assert job["status"]["state"]["phase"] == "Completed", job["status"]
    rank_pods = ranks.seen()
    assert {p.spec.node_name for p in rank_pods} == {placement.NODE_NAME}
    assert len({p.metadata.name for p in rank_pods}) == 3
    (master,) = {p.metadata.name: p for p in rank_pods if "-master-" in p.metadata.name}.values()
    run_env = {e.name: e.value for e in master.spec.containers[0].env}
    summary = wandb_offline.summary(wandb_offline.find_run_file(real_node, run_env["WANDB_RUN_ID"]))
    assert summary["train/steps"] > 0 and summary["eval/loss"] > 0, summary

    # kubernetes_default was the pods' own identity: the job created by airflow-worker, its
    # watches by airflow-triggerer, and nothing the pods asked refused.
    user = f"system:serviceaccount:{airflow_ns}:"
    audit = volcano_cluster.audit_log
    created = [
        e["user"]["username"]
        for e in chart.audit_events(audit, user)
        if e["verb"] == "create" and e["objectRef"].get("resource") == "jobs"
    ]
    assert created == [user + kx.WORKER_ACCOUNT], created
    watched = {
        e["objectRef"].get("resource")
        for e in chart.audit_events(audit, user + kx.TRIGGERER_ACCOUNT)
        if e["verb"] == "watch"
    }
    assert "jobs" in watched, watched
    deleted = [
        e["objectRef"].get("name")
        for e in chart.audit_events(audit, user + kx.TRIGGERER_ACCOUNT)
        if e["verb"] == "delete" and e["objectRef"].get("resource") == "jobs"
    ]
    assert deleted == [], deleted
    ips = {p.status.pod_ip for p in task_pods if p.status.pod_ip}
    ips |= {triggerer.status.pod_ip, restarted["ip"]}
    refused = chart.refused(audit, user, ips, since=started_at)
    assert not refused, "\n".join(refused)


def _start_triggerer(
    core: k8s.CoreV1Api, stack: kx.KubernetesExecutorStack, namespace: str
) -> None:
    core.create_namespaced_pod(namespace, stack.triggerer_pod())
    wait_for(
        lambda: _phase(core, namespace, kx.TRIGGERER_POD) == "Running",
        300,
        "the triggerer pod to run",
        interval=2,
    )


def _phase(core: k8s.CoreV1Api, namespace: str, name: str) -> str:
    phase = core.read_namespaced_pod(name, namespace).status.phase
    if phase in ("Failed", "Succeeded"):
        raise AssertionError(f"pod {name} ended {phase}:\n{pod_log(core, namespace, name)}")
    return phase


def _gone(core: k8s.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_pod(kx.TRIGGERER_POD, namespace)
    except k8s.ApiException as err:
        if err.status == 404:
            return True
        raise
    return False


def _the_job(api: k8s.ApiClient, namespace: str) -> dict[str, Any]:
    jobs = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs"
    )["items"]
    assert len(jobs) == 1, [j["metadata"]["name"] for j in jobs]
    return jobs[0]


def _tails(logs: dict[str, str]) -> str:
    return "\n".join(f"== {name}\n{log[-2500:]}" for name, log in logs.items())

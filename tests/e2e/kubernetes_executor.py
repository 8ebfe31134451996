"""Airflow under KubernetesExecutor on the local cluster's real node, shaped as the Helm chart
runs it (docs/helm.md): every task in a pod of its own, of the Airflow image built here
(``testing/cluster/airflow_image.py``), as the ``airflow-worker`` ServiceAccount, and the
triggerer in a pod of its own as ``airflow-triggerer``; each reads ``kubernetes_default`` as
``in_cluster: true`` (its pod's projected token, through the ``kubernetes`` Service).

The API server, the scheduler and the DAG processor stay host processes
(:class:`KubernetesExecutorStack`, the reliability tests' :class:`AirflowStack`): the
scheduler's KubernetesExecutor creates and watches the task pods with the cluster's admin
kubeconfig, where the chart's scheduler would use its own ServiceAccount (the executor's
rights, not the provider's: the provider runs in the pods). The pods reach the host's
components at the real node's bridge address (``node.GATEWAY``): PostgreSQL (the triggerer's
metadata DB) and the API server (the task pods' execution API) listen there, and on nothing
else but loopback. The DAGs are the host's ``dags/``, mounted read-only into every pod at the
same path (a ``hostPath``: the node is this host), as a chart's DAG volume would be.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from airflow_volcano_wandb.testing.cluster import node, placement
from airflow_volcano_wandb.testing.cluster.process import free_ports
from tests.e2e.airflow_stack import AirflowStack, wait_for
from tests.e2e.postgres import PostgresServer

WORKER_ACCOUNT, TRIGGERER_ACCOUNT = "airflow-worker", "airflow-triggerer"
TRIGGERER_POD = "airflow-triggerer"
#: The label the executor gives each task pod (with ``dag_id``, ``task_id``, ``try_number``).
TASK_POD_SELECTOR = "kubernetes_executor=True"
#: The logger of the provider's trigger lines in a task's log.
TRIGGER_LOGGER = "airflow_volcano_wandb.triggers.volcano.VolcanoJobTrigger"
#: Host settings that mean nothing in a pod, or name a host's file: never copied to the pods.
HOST_ONLY = (
    "AIRFLOW_HOME",
    "AIRFLOW__CORE__HOSTNAME_CALLABLE",
    "AIRFLOW__LOGGING__BASE_LOG_FOLDER",
    "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE",
    "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE",
)


def in_cluster_conn(jobs_ns: str) -> str:
    """docs/helm.md's ``AIRFLOW_CONN_KUBERNETES_DEFAULT``, with the test's jobs namespace."""
    return json.dumps(
        {"conn_type": "kubernetes", "extra": {"in_cluster": True, "namespace": jobs_ns}}
    )


def pod_spec(
    account: str, image: str, env: dict[str, str], dags: Path, container: str
) -> dict[str, Any]:
    """A pod of the Airflow image on the real node as ``account`` (its token mounted by the
    ServiceAccount admission, as in the chart), the DAGs mounted at the host's path."""
    return {
        "serviceAccountName": account,
        "restartPolicy": "Never",
        # The cluster's only scheduler (it has no kube-scheduler): a plain pod is placed in a
        # PodGroup of its own.
        "schedulerName": "volcano",
        "nodeSelector": placement.REAL_NODE_SELECTOR,
        "tolerations": [placement.REAL_NODE_TOLERATION],
        "containers": [
            {
                "name": container,
                "image": image,
                "imagePullPolicy": "Never",
                "env": [{"name": k, "value": v} for k, v in sorted(env.items())],
                "volumeMounts": [{"name": "dags", "mountPath": str(dags), "readOnly": True}],
            }
        ],
        "volumes": [{"name": "dags", "hostPath": {"path": str(dags), "type": "Directory"}}],
    }


@dataclass
class KubernetesExecutorStack(AirflowStack):
    """The host's part: PostgreSQL, the API server, one scheduler and the DAG processor, under
    KubernetesExecutor, listening on the bridge's address; :meth:`write_pod_template` and
    :meth:`triggerer_pod` make the pods' part."""

    #: Where the executor creates the task pods (the chart's release namespace).
    airflow_namespace: str = "airflow"
    #: The jobs' namespace: ``kubernetes_default``'s, in every component.
    jobs_namespace: str = "wandb"
    #: The Airflow image, as imported into the real node's containerd.
    image: str = ""
    _fixed_env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.executor, self.triggerers = "local", 0  # the base's env; the triggerer is a pod
        super().__post_init__()
        [port] = free_ports(1)  # known before the start: the pods' settings name it
        assert self.postgres_dir is not None
        self.postgres = PostgresServer(
            self.postgres_dir / "server",
            port=port,
            log_dir=self.log_dir,
            also_listen_on=(node.GATEWAY,),
            trusted_network=node.SUBNET,
        )

    @property
    def base_url(self) -> str:
        return f"http://{node.GATEWAY}:{self.api_port}"

    @property
    def pod_template_file(self) -> Path:
        return self.home / "pod_template.yaml"

    def env(self) -> dict[str, str]:
        """The base's settings, drawn once (its secrets are new at each call, and the pods
        must share them), with the executor's."""
        if not self._fixed_env:
            env = super().env()
            repository, tag = self.image.rsplit(":", 1)
            env.update(
                {
                    "AIRFLOW__CORE__EXECUTOR": "KubernetesExecutor",
                    "AIRFLOW__API__HOST": node.GATEWAY,
                    "AIRFLOW_CONN_KUBERNETES_DEFAULT": in_cluster_conn(self.jobs_namespace),
                    "AIRFLOW__KUBERNETES_EXECUTOR__NAMESPACE": self.airflow_namespace,
                    "AIRFLOW__KUBERNETES_EXECUTOR__IN_CLUSTER": "False",
                    "AIRFLOW__KUBERNETES_EXECUTOR__CONFIG_FILE": str(self.kubeconfig),
                    "AIRFLOW__KUBERNETES_EXECUTOR__POD_TEMPLATE_FILE": str(self.pod_template_file),
                    "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_REPOSITORY": repository,
                    "AIRFLOW__KUBERNETES_EXECUTOR__WORKER_CONTAINER_TAG": tag,
                    # Kept after they end, so the test reads each one (it deletes the namespace).
                    "AIRFLOW__KUBERNETES_EXECUTOR__DELETE_WORKER_PODS": "False",
                }
            )
            self._fixed_env = env
        return dict(self._fixed_env)

    def pod_env(self) -> dict[str, str]:
        """Every pod's settings: the host components' Airflow and W&B ones, the addresses the
        bridge's; the host name the pod's IP, where its log server answers."""
        env = {
            k: v.replace("127.0.0.1", node.GATEWAY)
            for k, v in self.env().items()
            if k.startswith(("AIRFLOW", "WANDB")) and k not in HOST_ONLY
        }
        env["AIRFLOW__CORE__HOSTNAME_CALLABLE"] = "airflow.utils.net.get_host_ip_address"
        return env

    def write_pod_template(self) -> Path:
        """The executor's ``pod_template_file``: it fills in ``base``'s command and image."""
        self.home.mkdir(parents=True, exist_ok=True)
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "task"},
            "spec": pod_spec(
                WORKER_ACCOUNT, self.image, self.pod_env(), self.dags_folder, container="base"
            ),
        }
        self.pod_template_file.write_text(yaml.safe_dump(pod, sort_keys=False))
        return self.pod_template_file

    def triggerer_pod(self) -> dict[str, Any]:
        """Airflow's ``triggerer`` in a pod as ``airflow-triggerer``, as the chart's StatefulSet
        has one: a pod deleted under a wait is created again under the same name."""
        spec = pod_spec(
            TRIGGERER_ACCOUNT, self.image, self.pod_env(), self.dags_folder, container="triggerer"
        )
        spec["containers"][0]["command"] = ["python3", "-m", "airflow", "triggerer"]
        return {
            "metadata": {"name": TRIGGERER_POD, "labels": {"component": "triggerer"}},
            "spec": spec,
        }


@dataclass
class Followed:
    """What the test saw of the manual DAG's run through the REST API."""

    wait_states: list[str] = field(default_factory=list)
    #: The wait task instance as first seen deferred to each triggerer that held its trigger,
    #: in order (a restart under the wait hands the trigger to the next one).
    deferred_tis: list[dict[str, Any]] = field(default_factory=list)
    #: The wait task's log read while it was deferred, per triggerer (its job's id), served by
    #: that triggerer's log server, read until it holds a line of the trigger's.
    lines_while_deferred: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    dag_run: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    def served(self, triggerer_id: int) -> list[dict[str, Any]]:
        """The trigger's lines that the triggerer's log server served while it held the wait."""
        lines = self.lines_while_deferred.get(triggerer_id, [])
        return [x for x in lines if x.get("logger") == TRIGGER_LOGGER]


def follow(
    stack: AirflowStack,
    dag_id: str,
    run_id: str,
    timeout: float,
    once_served: Callable[[], None] | None = None,
) -> Followed:
    """Poll the run until it ends: the wait task's states, the task instance deferred to each
    triggerer, and its log while deferred. ``once_served`` is called once, when the first
    triggerer has served the trigger's lines (to restart a component under the wait)."""
    seen, started = Followed(), time.monotonic()
    ti_path = f"/dags/{dag_id}/dagRuns/{run_id}/taskInstances/wait"

    def ended() -> dict[str, Any] | None:
        nonlocal once_served
        stack.check_alive()
        ti = stack.api("GET", ti_path)
        if ti["state"] and (not seen.wait_states or seen.wait_states[-1] != ti["state"]):
            seen.wait_states.append(ti["state"])
        triggerer = ti.get("triggerer_job") if ti["state"] == "deferred" else None
        if triggerer is not None and not seen.served(triggerer["id"]):
            held = [t["triggerer_job"]["id"] for t in seen.deferred_tis]
            if held[-1:] != [triggerer["id"]]:
                seen.deferred_tis.append(ti)
            answer = stack.api("GET", f"{ti_path}/logs/1", params={"full_content": "true"})
            lines = [x if isinstance(x, dict) else {"event": str(x)} for x in answer["content"]]
            seen.lines_while_deferred[triggerer["id"]] = lines
        first = seen.deferred_tis[0]["triggerer_job"]["id"] if seen.deferred_tis else None
        if once_served is not None and first is not None and seen.served(first):
            restart, once_served = once_served, None
            try:
                restart()
            except Exception as err:  # not one of the errors wait_for retries on
                raise AssertionError(f"the restart under the wait failed: {err!r}") from err
        run = stack.api("GET", f"/dags/{dag_id}/dagRuns/{run_id}")
        return run if run["state"] in ("success", "failed") else None

    seen.dag_run = wait_for(ended, timeout, f"the {dag_id} run to end", interval=2)
    seen.seconds = time.monotonic() - started
    return seen


def ended_task_pods(core: k8s.CoreV1Api, namespace: str, timeout: float) -> list[k8s.V1Pod]:
    """The executor's task pods once each has ended: a task's end reaches the API server a
    moment before its pod's process exits."""

    def all_ended() -> list[k8s.V1Pod] | None:
        pods = core.list_namespaced_pod(namespace, label_selector=TASK_POD_SELECTOR).items
        return pods if all(p.status.phase in ("Succeeded", "Failed") for p in pods) else None

    return wait_for(all_ended, timeout, "the task pods to end", interval=2)

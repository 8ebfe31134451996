"""Airflow's components as pods of the chart: the ServiceAccounts docs/helm.md names, bound
as ``docker/k8s/rbac-helm-binding.example.yaml`` binds them, running the Airflow image built
here (``testing/cluster/airflow_image.py``) on the real node, with ``in_cluster: true``.

The manifests are the repo's own, read from ``docker/k8s/``: only their namespaces change (the
jobs' ``wandb`` becomes the test's namespace, Airflow's ``airflow`` a namespace made for the
test), so a binding that is wrong in the repo is wrong here. The apiserver's audit log then says
what each identity did: any Forbidden (403) or refused token (401) is named by its verb and
resource.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from airflow_volcano_wandb.testing.cluster import airflow_image, node, placement

REPO = Path(__file__).resolve().parents[2]
RBAC = REPO / "docker" / "k8s" / "rbac.yaml"
HELM_BINDING = REPO / "docker" / "k8s" / "rbac-helm-binding.example.yaml"
FIT_CHECK = REPO / "docker" / "k8s" / "rbac-fit-check.yaml"
HELM_PAGE = REPO / "docs" / "helm.md"
TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def load_airflow_image(state_dir: Path) -> str:
    """Build (or find cached) the Airflow image and import it into the real node's containerd."""
    node.import_image(state_dir, airflow_image.airflow_image())
    return airflow_image.AIRFLOW_IMAGE


def _docs(path: Path) -> Iterator[dict[str, Any]]:
    return (d for d in yaml.safe_load_all(path.read_text()) if d)


def bind_like_the_chart(api: k8s.ApiClient, jobs_ns: str, airflow_ns: str) -> list[str]:
    """rbac.yaml's Role in ``jobs_ns``, the helm binding, and its subjects' ServiceAccounts in
    ``airflow_ns``; returns the ServiceAccounts' names."""
    core, rbac = k8s.CoreV1Api(api), k8s.RbacAuthorizationV1Api(api)
    (role,) = (d for d in _docs(RBAC) if d["kind"] == "Role")
    role["metadata"]["namespace"] = jobs_ns
    rbac.create_namespaced_role(jobs_ns, role)
    (binding,) = _docs(HELM_BINDING)
    binding["metadata"]["namespace"] = jobs_ns
    names = []
    for subject in binding["subjects"]:
        assert subject["namespace"] == "airflow", subject  # the chart's release namespace
        subject["namespace"] = airflow_ns
        names.append(subject["name"])
        core.create_namespaced_service_account(airflow_ns, {"metadata": {"name": subject["name"]}})
    rbac.create_namespaced_role_binding(jobs_ns, binding)
    return names


def bind_fit_check_like_the_docs(api: k8s.ApiClient, airflow_ns: str, executor: str) -> str:
    """rbac-fit-check.yaml's ClusterRole (kept: other tests share it) and docs/helm.md's
    ClusterRoleBinding for it, its subjects in ``airflow_ns`` (the scheduler only under
    LocalExecutor, as the page says); returns the binding's name, unique to ``airflow_ns``."""
    rbac = k8s.RbacAuthorizationV1Api(api)
    (role,) = (d for d in _docs(FIT_CHECK) if d["kind"] == "ClusterRole")
    try:
        rbac.create_cluster_role(role)
    except k8s.ApiException as err:
        if err.status != 409:
            raise
    blocks = re.findall(r"^```yaml\n(.*?)^```", HELM_PAGE.read_text(), re.M | re.S)
    docs = [d for block in blocks for d in yaml.safe_load_all(block) if d]
    (binding,) = (d for d in docs if d.get("kind") == "ClusterRoleBinding")
    binding["metadata"]["name"] += f"-{airflow_ns}"
    binding["subjects"] = [
        {**s, "namespace": airflow_ns}
        for s in binding["subjects"]
        if s["name"] != "airflow-scheduler" or executor == "LocalExecutor"
    ]
    rbac.create_cluster_role_binding(binding)
    return binding["metadata"]["name"]


def token_volume(expiration_seconds: int) -> dict[str, Any]:
    """What the ServiceAccount admission mounts (``kube-api-access-*``), with the token's life
    chosen: token, the cluster's CA and the namespace, at the path ``in_cluster`` reads."""
    return {
        "name": "sa-token",
        "projected": {
            "sources": [
                {"serviceAccountToken": {"path": "token", "expirationSeconds": expiration_seconds}},
                {
                    "configMap": {
                        "name": "kube-root-ca.crt",
                        "items": [{"key": "ca.crt", "path": "ca.crt"}],
                    }
                },
                {
                    "downwardAPI": {
                        "items": [
                            {"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}
                        ]
                    }
                },
            ]
        },
    }


def in_cluster_conn(jobs_ns: str) -> str:
    """docs/helm.md's ``AIRFLOW_CONN_KUBERNETES_DEFAULT``, with the test's jobs namespace."""
    return json.dumps(
        {"conn_type": "kubernetes", "extra": {"in_cluster": True, "namespace": jobs_ns}}
    )


def airflow_pod(
    name: str,
    service_account: str,
    image: str,
    command: list[str],
    env: dict[str, str],
    token_seconds: int,
    config_map: str | None = None,
) -> dict[str, Any]:
    """A pod of the Airflow image on the real node, as ``service_account`` with a projected
    token of ``token_seconds``; ``config_map`` mounted at ``/probe``."""
    mounts = [{"name": "sa-token", "mountPath": TOKEN_DIR, "readOnly": True}]
    volumes = [token_volume(token_seconds)]
    if config_map:
        mounts.append({"name": "probe", "mountPath": "/probe", "readOnly": True})
        volumes.append({"name": "probe", "configMap": {"name": config_map}})
    return {
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "serviceAccountName": service_account,
            "automountServiceAccountToken": False,  # the volume above, with its own lifetime
            "restartPolicy": "Never",
            # The cluster's only scheduler (it has no kube-scheduler); it places a plain pod in
            # a PodGroup of its own, as the chart's pods are placed on a cluster running it.
            "schedulerName": "volcano",
            "nodeSelector": placement.REAL_NODE_SELECTOR,
            "tolerations": [placement.REAL_NODE_TOLERATION],
            "containers": [
                {
                    "name": "main",
                    "image": image,
                    "imagePullPolicy": "Never",
                    "command": command,
                    "env": [{"name": k, "value": v} for k, v in env.items()],
                    "volumeMounts": mounts,
                }
            ],
            "volumes": volumes,
        },
    }


def wait_for_pod_end(core: k8s.CoreV1Api, ns: str, name: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        phase = core.read_namespaced_pod(name, ns).status.phase
        if phase in ("Succeeded", "Failed"):
            return phase
        time.sleep(5)
    raise AssertionError(f"pod {ns}/{name} did not end within {timeout:.0f}s")


def probe_facts(pod: Any) -> list[dict[str, Any]]:
    """The facts ``trigger_probe.py`` left in its pod's termination message."""
    (status,) = pod.status.container_statuses
    message = status.state.terminated.message if status.state.terminated else None
    assert message, f"no termination message: {status}"
    return json.loads(message)


def audit_events(audit_log: Path, username_prefix: str) -> list[dict[str, Any]]:
    """The audit log's completed requests of identities whose name starts so."""
    events = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if event.get("stage") != "ResponseComplete":
            continue
        if event.get("user", {}).get("username", "").startswith(username_prefix):
            events.append(event)
    return events


def refused(
    audit_log: Path, username_prefix: str, source_ips: set[str], since: float = 0.0
) -> list[str]:
    """Every Forbidden of these identities, and every 401 from these pod IPs, by verb and
    resource (an unauthenticated request carries no username, only its source); on a shared
    cluster, only those received after ``since`` (a pod's IP is reused)."""
    out = []
    for line in audit_log.read_text().splitlines():
        event = json.loads(line)
        if since and received_at(event) < since:
            continue
        code = event.get("responseStatus", {}).get("code")
        user = event.get("user", {}).get("username", "")
        ref = event.get("objectRef", {})
        what = f"{code} {event.get('verb')} {ref.get('resource')}/{ref.get('subresource', '')}"
        if code == 403 and user.startswith(username_prefix):
            out.append(f"{what} in {ref.get('namespace')} by {user}")
        if code == 401 and source_ips & set(event.get("sourceIPs", [])):
            out.append(f"{what} from {event.get('sourceIPs')}: {event.get('requestURI')}")
    return out


def received_at(event: dict[str, Any]) -> float:
    """When the apiserver received the request (epoch seconds)."""
    return datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()


def credential_id(event: dict[str, Any]) -> str:
    """Which token a request carried (the apiserver's ``JTI=...`` of a ServiceAccount token)."""
    extra = event.get("user", {}).get("extra", {})
    return (extra.get("authentication.kubernetes.io/credential-id") or [""])[0]

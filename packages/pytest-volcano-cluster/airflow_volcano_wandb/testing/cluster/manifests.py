"""Objects and config files the harness writes: kubeconfig, webhooks, nodes, KWOK/Volcano config."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import yaml

from airflow_volcano_wandb.testing.cluster.certs import PKI

STAGES_DIR = Path(__file__).parent / "stages"
NODE_LABEL = "airflow-volcano-wandb.io/simulated"
GPU_RESOURCE = "nvidia.com/gpu"

# What a Helm install of Volcano enables, minus the ones for objects this project never uses.
ADMISSIONS: dict[str, tuple[str, list[str], list[str], list[str]]] = {
    # path: (kind, api group, resources, operations)
    "/jobs/mutate": ("mutating", ["batch.volcano.sh"], ["jobs"], ["CREATE"]),
    "/jobs/validate": ("validating", ["batch.volcano.sh"], ["jobs"], ["CREATE", "UPDATE"]),
    "/podgroups/mutate": ("mutating", ["scheduling.volcano.sh"], ["podgroups"], ["CREATE"]),
    "/pods/mutate": ("mutating", [""], ["pods"], ["CREATE"]),
    "/pods/validate": ("validating", [""], ["pods"], ["CREATE"]),
    "/queues/mutate": ("mutating", ["scheduling.volcano.sh"], ["queues"], ["CREATE"]),
    "/queues/validate": (
        "validating",
        ["scheduling.volcano.sh"],
        ["queues"],
        ["CREATE", "UPDATE", "DELETE"],
    ),
}
_WEBHOOK_NAMES = {
    "/jobs/mutate": "mutatejob.volcano.sh",
    "/jobs/validate": "validatejob.volcano.sh",
    "/podgroups/mutate": "mutatepodgroup.volcano.sh",
    "/pods/mutate": "mutatepod.volcano.sh",
    "/pods/validate": "validatepod.volcano.sh",
    "/queues/mutate": "mutatequeue.volcano.sh",
    "/queues/validate": "validatequeue.volcano.sh",
}

# The default scheduler policy Volcano ships with (gang scheduling is the point of it).
SCHEDULER_CONF = """\
actions: "enqueue, allocate, backfill"
tiers:
- plugins:
  - name: priority
  - name: gang
    enablePreemptable: false
  - name: conformance
- plugins:
  - name: overcommit
  - name: drf
    enablePreemptable: false
  - name: predicates
  - name: proportion
  - name: nodeorder
  - name: binpack
"""


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def kubeconfig(server: str, pki: PKI, user: str = "admin") -> str:
    """An admin kubeconfig with the certs inlined, so it works after being copied elsewhere."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "avw-local",
                "cluster": {"server": server, "certificate-authority-data": _b64(pki.ca)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {
                    "client-certificate-data": _b64(pki.cert(user)),
                    "client-key-data": _b64(pki.key(user)),
                },
            }
        ],
        "contexts": [{"name": "avw-local", "context": {"cluster": "avw-local", "user": user}}],
        "current-context": "avw-local",
    }
    return yaml.safe_dump(config, sort_keys=False)


def webhook_configurations(port: int, pki: PKI) -> list[tuple[str, dict[str, Any]]]:
    """(collection path, object) for every webhook configuration, named as Volcano expects.

    vc-webhook-manager looks these up by name at start-up (and refreshes their caBundle),
    but never creates them; a Helm install would.
    """
    out = []
    for path, (kind, groups, resources, operations) in ADMISSIONS.items():
        name = "volcano-admission-service" + path.replace("/", "-")
        webhook = {
            "name": _WEBHOOK_NAMES[path],
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": "Fail",
            "timeoutSeconds": 10,
            "clientConfig": {"url": f"https://127.0.0.1:{port}{path}", "caBundle": _b64(pki.ca)},
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": ["kube-system", "volcano-system"],
                    }
                ]
            },
            "rules": [
                {
                    "apiGroups": groups,
                    "apiVersions": [
                        "v1alpha1"
                        if groups[0] == "batch.volcano.sh"
                        else "v1beta1"
                        if groups[0]
                        else "v1"
                    ],
                    "resources": resources,
                    "operations": operations,
                    "scope": "*",
                }
            ],
        }
        if kind == "mutating":
            webhook["reinvocationPolicy"] = "Never"
            collection = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
            obj_kind = "MutatingWebhookConfiguration"
        else:
            collection = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
            obj_kind = "ValidatingWebhookConfiguration"
        out.append(
            (
                collection,
                {
                    "apiVersion": "admissionregistration.k8s.io/v1",
                    "kind": obj_kind,
                    "metadata": {"name": name},
                    "webhooks": [webhook],
                },
            )
        )
    return out


def volcano_release_record(version: str) -> dict[str, Any]:
    """The Deployment a Helm install of Volcano has for its admission webhook, with no replicas.

    The harness runs ``vc-webhook-manager`` as a local process, so nothing in the API would
    name its release; this zero-replica record carries the chart's image (whose tag is the
    release built) so that ``doctor`` reads the installed version as on a real cluster.
    """
    labels = {"app": "volcano-admission"}
    image = f"docker.io/volcanosh/vc-webhook-manager:{version}"
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "volcano-admission", "namespace": "volcano-system", "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "admission", "image": image}]},
            },
        },
    }


def node(index: int, gpus: int, cpu: str = "64", memory: str = "512Gi") -> dict[str, Any]:
    """A fake GPU node. Node status may be set on create; KWOK then marks it Ready."""
    name = f"kwok-gpu-node-{index}"
    resources = {
        "cpu": cpu,
        "memory": memory,
        "pods": "110",
        GPU_RESOURCE: str(gpus),
        "ephemeral-storage": "1Ti",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                NODE_LABEL: "true",
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node.kubernetes.io/instance-type": f"sim-gpu-{gpus}",
                "nvidia.com/gpu.present": "true",
            },
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
        },
        "spec": {},
        "status": {"allocatable": resources, "capacity": resources},
    }


def kwok_config(default_log: Path) -> str:
    """KWOK's config: our Stage files plus a catch-all log source for pods not yet described."""
    docs = [(STAGES_DIR / "nodes.yaml").read_text(), (STAGES_DIR / "pods.yaml").read_text()]
    docs.append(
        yaml.safe_dump(
            {
                "apiVersion": "kwok.x-k8s.io/v1alpha1",
                "kind": "ClusterLogs",
                "metadata": {"name": "sim-default-logs"},
                "spec": {"logs": [{"logsFile": str(default_log), "follow": True}]},
            }
        )
    )
    return "\n---\n".join(d.strip() for d in docs) + "\n"


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]

"""What a Volcano job needs to run on the real node (see :mod:`.node`): its selector and
toleration, and a claim for the W&B files that outlives the pods."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError

NODE_NAME = "avw-real-node"
REAL_NODE_LABEL = "airflow-volcano-wandb.io/real-node"
REAL_NODE_SELECTOR = {REAL_NODE_LABEL: "true"}
REAL_NODE_TOLERATION = {
    "key": REAL_NODE_LABEL,
    "operator": "Equal",
    "value": "true",
    "effect": "NoSchedule",
}
WANDB_MOUNT = "/wandb"
WANDB_CLAIM = "avw-wandb"


def node_dir(state_dir: Path) -> Path:
    """The real node's files in a cluster's state dir."""
    return state_dir / "node"


def place_on_real_node(template: dict[str, Any]) -> dict[str, Any]:
    """A copy of a Volcano job template whose every pod asks for the real node.

    Each pod gets the node's selector and toleration, and ``WANDB_DIR`` on the namespace's
    ``WANDB_CLAIM`` (see :func:`wandb_dir`), so the W&B run files outlive the pods that wrote
    them. A claim, not a ``hostPath``: the operator's pod security check refuses those. And
    ``WANDB_MODE=offline``: the node's pods reach each other and the cluster DNS, nothing
    outside (the bridge has no NAT), so an online run could only fail.
    """
    placed = copy.deepcopy(template)
    for task in placed["spec"]["tasks"]:
        pod = task["template"]["spec"]
        pod["nodeSelector"] = {**(pod.get("nodeSelector") or {}), **REAL_NODE_SELECTOR}
        pod["tolerations"] = [*(pod.get("tolerations") or []), REAL_NODE_TOLERATION]
        volume = {"name": "avw-wandb", "persistentVolumeClaim": {"claimName": WANDB_CLAIM}}
        pod["volumes"] = [*(pod.get("volumes") or []), volume]
        for container in pod["containers"]:
            mount = {"name": "avw-wandb", "mountPath": WANDB_MOUNT}
            container["volumeMounts"] = [*(container.get("volumeMounts") or []), mount]
            env = [
                {"name": "WANDB_DIR", "value": WANDB_MOUNT},
                {"name": "WANDB_MODE", "value": "offline"},
            ]
            container["env"] = [*(container.get("env") or []), *env]
    return placed


def wandb_dir(kube: Kube, state_dir: Path, namespace: str) -> Path:
    """The host directory behind ``namespace``'s ``WANDB_CLAIM``, created with its volume.

    A ``hostPath`` PersistentVolume per namespace, bound to the claim in advance; writable by
    the trainer's uid. Made again when a namespace of the same name comes back.
    """
    path = node_dir(state_dir) / "wandb" / namespace
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o1777)
    volume = f"avw-wandb-{namespace}"
    existing = kube.get_or_none(f"/api/v1/persistentvolumes/{volume}")
    claim_path = f"/api/v1/namespaces/{namespace}/persistentvolumeclaims/{WANDB_CLAIM}"
    if existing and kube.get_or_none(claim_path):
        return path
    if existing:  # released by a deleted namespace's claim
        kube.request("DELETE", f"/api/v1/persistentvolumes/{volume}")
        deadline = time.monotonic() + 30
        while kube.get_or_none(f"/api/v1/persistentvolumes/{volume}"):
            if time.monotonic() > deadline:
                raise KubeError(409, f"persistentvolume {volume} is not going away")
            time.sleep(0.2)
    spec = {"accessModes": ["ReadWriteMany"], "storageClassName": ""}
    kube.create(
        "/api/v1/persistentvolumes",
        {
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                **spec,
                "capacity": {"storage": "1Gi"},
                "persistentVolumeReclaimPolicy": "Retain",
                "hostPath": {"path": str(path), "type": "Directory"},
                "claimRef": {"namespace": namespace, "name": WANDB_CLAIM},
            },
        },
    )
    if not kube.get_or_none(claim_path):
        kube.create(
            f"/api/v1/namespaces/{namespace}/persistentvolumeclaims",
            {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "metadata": {"name": WANDB_CLAIM, "namespace": namespace},
                "spec": {
                    **spec,
                    "volumeName": volume,
                    "resources": {"requests": {"storage": "1Gi"}},
                },
            },
        )
    return path

"""A simulated container starts only once its Secret references resolve, as with a kubelet.

A kubelet builds a container's environment when it creates the container. A required
``secretKeyRef`` whose Secret (or key) does not exist leaves the container waiting with the
reason ``CreateContainerConfigError`` (message ``secret "NAME" not found``), retried until it
appears; the pod stays ``Pending`` on its node, holding what it was scheduled with (GPUs too).

KWOK cannot look at other objects, so the ``podlogs`` component does this part: KWOK's start
stage (``stages/pods.yaml``, ``sim-pod-start``) starts a pod only when it has no required
``secretKeyRef`` or is annotated ``REFS_ANNOTATION: resolved``. :class:`SecretRefGate` sets
that annotation once every reference resolves, and until then gives the pod the kubelet's
waiting status, checking again every ``RECHECK_SECONDS``. Only ``env[].valueFrom`` is
simulated (the provider's only kind of reference), not ``envFrom`` or Secret volumes.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError

REFS_ANNOTATION = "sim.airflow-volcano-wandb.io/secret-refs"
RESOLVED = "resolved"
WAITING_REASON = "CreateContainerConfigError"
RECHECK_SECONDS = 1.0
MERGE_PATCH = "application/merge-patch+json"


def required_refs(pod: dict[str, Any]) -> list[dict[str, Any]]:
    """The pod's ``secretKeyRef``s that are not ``optional``, init containers' too."""
    spec = pod.get("spec") or {}
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    refs = []
    for container in containers:
        for var in container.get("env") or []:
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref and not ref.get("optional"):
                refs.append(ref)
    return refs


def unresolved(kube: Kube, namespace: str, refs: list[dict[str, Any]]) -> str | None:
    """The kubelet's message for the first reference that does not resolve; None if all do."""
    for ref in refs:
        name, key = ref.get("name", ""), ref.get("key", "")
        secret = kube.get_or_none(f"/api/v1/namespaces/{namespace}/secrets/{name}")
        if secret is None:
            return f'secret "{name}" not found'
        if key not in (secret.get("data") or {}):
            return f"couldn't find key {key} in Secret {namespace}/{name}"
    return None


def _waiting_status(pod: dict[str, Any], message: str) -> dict[str, Any]:
    return {
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}],
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {"waiting": {"reason": WAITING_REASON, "message": message}},
                }
                for c in pod["spec"].get("containers", [])
            ],
        }
    }


class SecretRefGate:
    """Holds back scheduled pods whose Secret references do not resolve yet."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self._waiting: dict[str, tuple[dict[str, Any], str]] = {}  # uid -> (pod, message)
        self._lock = threading.Lock()

    def may_start(self, kind: str, pod: dict[str, Any]) -> bool:
        """Handle a pod event; whether the pod's containers may start (else they wait)."""
        meta = pod["metadata"]
        annotations = meta.get("annotations") or {}
        held = (
            kind != "DELETED"
            and not meta.get("deletionTimestamp")
            and (pod.get("spec") or {}).get("nodeName")
            and (pod.get("status") or {}).get("phase", "Pending") == "Pending"
            and annotations.get(REFS_ANNOTATION) != RESOLVED
            and required_refs(pod)
        )
        if not held:
            with self._lock:
                self._waiting.pop(meta["uid"], None)
            return annotations.get(REFS_ANNOTATION) == RESOLVED or not required_refs(pod)
        return self._check(pod)

    def _check(self, pod: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        path = f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}"
        message = None
        try:
            message = unresolved(self.kube, meta["namespace"], required_refs(pod))
            if message is None:
                patch = {"metadata": {"annotations": {REFS_ANNOTATION: RESOLVED}}}
                self.kube.request("PATCH", path, patch, content_type=MERGE_PATCH)
                with self._lock:
                    self._waiting.pop(meta["uid"], None)
                return True
            with self._lock:
                shown = self._waiting.get(meta["uid"], (None, None))[1]
            if message != shown:
                status = _waiting_status(pod, message)
                self.kube.request("PATCH", f"{path}/status", status, content_type=MERGE_PATCH)
        except KubeError as err:
            if err.status == 404:  # the pod went meanwhile
                with self._lock:
                    self._waiting.pop(meta["uid"], None)
                return False
            print(f"secret_refs: {meta['namespace']}/{meta['name']}: {err}", file=sys.stderr)
            message = None  # shown again at the next look
        with self._lock:
            self._waiting[meta["uid"]] = (pod, message or "")
        return False

    def recheck_forever(self) -> None:
        """Look again at every held pod, as the kubelet retries a container's creation."""
        while True:
            time.sleep(RECHECK_SECONDS)
            with self._lock:
                pods = [pod for pod, _ in self._waiting.values()]
            for pod in pods:
                try:
                    self._check(pod)
                except Exception as err:  # the apiserver restarting must not end the loop
                    print(f"secret_refs: recheck failed: {err!r}", file=sys.stderr, flush=True)

"""Starting a local cluster's components and waiting until each is ready.

:class:`Starter` starts components and polls a probe of each (the probes are here too), and
fails fast with :class:`ClusterError`, naming the component and the tail of its log, when one
dies or is not ready in time.
"""

from __future__ import annotations

import os
import socket
import ssl
import sys
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from airflow_volcano_wandb.testing.cluster import build, manifests, process
from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError


class ClusterError(RuntimeError):
    """``up`` failed; ``component`` names the culprit and the message ends with its log tail."""

    def __init__(self, component: str, reason: str, state_dir: Path) -> None:
        log = process.log_file(state_dir, component)
        super().__init__(f"{component}: {reason}\n--- last lines of {log} ---\n{process.tail(log)}")
        self.component = component


def say(message: str) -> None:
    """One progress line of the cluster's, on stderr."""
    print(f"[cluster] {message}", file=sys.stderr, flush=True)


class Starter:
    """Starts components and waits on readiness, failing fast when a component dies."""

    def __init__(self, state_dir: Path, deadline: float) -> None:
        self.state_dir = state_dir
        self.deadline = deadline
        self.started: list[str] = []
        self.t0 = time.monotonic()
        self.verbose = bool(os.environ.get("AVW_CLUSTER_VERBOSE"))

    def start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        process.start(self.state_dir, name, argv, env)
        self.started.append(name)

    def check_alive(self) -> None:
        for name in self.started:
            if not process.started_alive(self.state_dir, name):
                raise ClusterError(name, "exited during start-up", self.state_dir)

    def wait(self, component: str, what: str, probe: Callable[[], bool]) -> None:
        last_error: Exception | None = None
        while True:
            self.check_alive()
            try:
                if probe():
                    if self.verbose:
                        say(f"{component}: {what} ({time.monotonic() - self.t0:.1f}s)")
                    return
            except (OSError, KubeError, ssl.SSLError, KeyError, ValueError) as err:
                last_error = err
            if time.monotonic() > self.deadline:
                detail = f" (last error: {last_error})" if last_error else ""
                raise ClusterError(
                    component, f"timed out waiting for {what}{detail}", self.state_dir
                )
            time.sleep(0.25)


def http_ok(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as resp:
        return resp.status == 200


def tls_answers(port: int) -> bool:
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=2) as sock,
        ctx.wrap_socket(sock, server_hostname="127.0.0.1"),
    ):
        return True


def crd_files() -> list[Path]:
    volcano = build.module_file(
        "volcano.sh/volcano", build.BY_NAME["vc-scheduler"].version, "config/crd/volcano/bases"
    )
    kwok = build.module_file(
        "sigs.k8s.io/kwok",
        build.BY_NAME["kwok"].version,
        "kustomize/crd/bases/kwok.x-k8s.io_logs.yaml",
    )
    return [*sorted(volcano.glob("*.yaml")), kwok]


def apply_crds(kube: Kube) -> list[str]:
    names = []
    for path in crd_files():
        for doc in manifests.load_yaml_docs(path):
            kube.apply("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
            names.append(doc["metadata"]["name"])
    return names


def crds_established(kube: Kube, names: list[str]) -> bool:
    for name in names:
        crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
        conds = {c["type"]: c["status"] for c in crd.get("status", {}).get("conditions", [])}
        if conds.get("Established") != "True":
            return False
    return True


def nodes_ready(kube: Kube, count: int) -> bool:
    nodes = kube.get(f"/api/v1/nodes?labelSelector={manifests.NODE_LABEL}%3Dtrue")["items"]
    ready = [
        n
        for n in nodes
        if any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in n.get("status", {}).get("conditions", [])
        )
    ]
    return len(ready) >= count


def queue_open(kube: Kube) -> bool:
    queue = kube.get_or_none("/apis/scheduling.volcano.sh/v1beta1/queues/default")
    return bool(queue) and queue.get("status", {}).get("state") == "Open"


def webhook_defaults_jobs(kube: Kube) -> bool:
    """A dry-run job create goes through both Volcano webhooks; the mutator sets the queue."""
    probe = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "avw-readiness-probe", "namespace": "default"},
        "spec": {
            "tasks": [
                {
                    "name": "t",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [{"name": "c", "image": "busybox"}],
                            "restartPolicy": "Never",
                        }
                    },
                }
            ]
        },
    }
    created = kube.request(
        "POST", "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs?dryRun=All", probe
    )
    return created.get("spec", {}).get("queue") == "default"


def default_sa(kube: Kube) -> bool:
    return kube.get_or_none("/api/v1/namespaces/default/serviceaccounts/default") is not None

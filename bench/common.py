"""Shared pieces of the benchmarks: cluster access, job bodies, apiserver metrics, statistics.

Everything here talks to the local cluster through the harness's own admin client (stdlib
only), so the orchestrating process stays light and its requests are easy to tell apart from
the measured process's.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import statistics
import sys
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity  # noqa: E402
from airflow_volcano_wandb.testing.cluster import cluster as local_cluster  # noqa: E402
from airflow_volcano_wandb.testing.cluster import manifests  # noqa: E402
from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError  # noqa: E402
from test_support.jobs import EXIT_CODE_ANNOTATION  # noqa: E402

GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"
SIM_DURATION = "sim.airflow-volcano-wandb.io/duration"
BENCH_LABEL = "bench.airflow-volcano-wandb.io/run"
BENCH_NODE_PREFIX = 900  # extra KWOK nodes are kwok-gpu-node-900, -901, ...
PODS_PER_NODE = 110
RESULTS = REPO / "bench" / "results"
PY = sys.executable
#: The benchmark run's start: run_all.py imports this module first.
T0 = time.monotonic()


def say(message: str) -> None:
    """One progress line of the benchmark run, with the seconds since it started."""
    print(f"[bench {time.monotonic() - T0:6.0f}s] {message}", flush=True)


# ---- cluster ---------------------------------------------------------------------------


class Cluster:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir.resolve()
        state = json.loads((self.state_dir / "state.json").read_text())
        self.server: str = state["server"]
        self.port = int(state["ports"]["apiserver"])
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.kube: Kube = local_cluster.admin_client(self.state_dir, self.server)
        self.namespaces: list[str] = []

    def jobs_path(self, namespace: str) -> str:
        return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"

    def create_namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.kube.request(
            "POST",
            "/api/v1/namespaces",
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
        )
        deadline = time.monotonic() + 60
        while self.kube.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default") is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"namespace {name}: no default service account")
            time.sleep(0.2)
        self.namespaces.append(name)
        return name

    def delete_namespace(self, name: str) -> None:
        try:
            self.kube.request("DELETE", f"/api/v1/namespaces/{name}")
        except KubeError as err:
            if err.status != 404:
                raise

    def wait_namespace_gone(self, name: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.kube.get_or_none(f"/api/v1/namespaces/{name}") is not None:
            if time.monotonic() > deadline:
                return False
            time.sleep(1)
        return True

    def wait_namespaces_gone(self, timeout: float = 120) -> bool:
        """Wait until every namespace this run made is gone (its pods with it)."""
        deadline = time.monotonic() + timeout
        for name in self.namespaces:
            self.delete_namespace(name)
        while time.monotonic() < deadline:
            if all(
                self.kube.get_or_none(f"/api/v1/namespaces/{n}") is None for n in self.namespaces
            ):
                return True
            time.sleep(1)
        return False

    def ensure_pod_capacity(self, pods: int) -> list[str]:
        """Add simulated nodes until the cluster holds ``pods`` more pods; return their names."""
        nodes = self.kube.get("/api/v1/nodes")["items"]
        free = 0
        for node in nodes:
            # A tainted node (the real node: NoSchedule) takes none of the bench's pods.
            if not node["spec"].get("taints"):
                free += int(node["status"].get("allocatable", {}).get("pods", "0"))
        used = len(self.kube.get("/api/v1/pods?fieldSelector=status.phase%3DRunning")["items"])
        missing = pods - (free - used)
        added: list[str] = []
        index = BENCH_NODE_PREFIX
        existing = {n["metadata"]["name"] for n in nodes}
        while missing > 0:
            body = manifests.node(index, gpus=8)
            index += 1
            if body["metadata"]["name"] in existing:
                continue
            self.kube.create("/api/v1/nodes", body)
            added.append(body["metadata"]["name"])
            missing -= PODS_PER_NODE
        deadline = time.monotonic() + 60
        while added and time.monotonic() < deadline:
            ready = 0
            for name in added:
                node = self.kube.get(f"/api/v1/nodes/{name}")
                conds = {c["type"]: c["status"] for c in node["status"].get("conditions", [])}
                ready += conds.get("Ready") == "True"
            if ready == len(added):
                break
            time.sleep(0.5)
        return added

    def delete_nodes(self, names: Iterable[str]) -> None:
        for name in names:
            with contextlib.suppress(KubeError):
                self.kube.request("DELETE", f"/api/v1/nodes/{name}")

    def create_jobs(self, namespace: str, bodies: list[dict], threads: int = 8) -> list[float]:
        """Create the jobs in parallel; return the wall time at which each create returned."""
        path = self.jobs_path(namespace)

        def one(body: dict) -> float:
            for attempt in range(5):
                try:
                    self.kube.request("POST", path, body, timeout=30)
                    return time.time()
                except KubeError as err:
                    if err.status == 409:
                        return time.time()
                    if attempt == 4:
                        raise
                    time.sleep(0.5 * (attempt + 1))
            return time.time()

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, bodies))

    def list_jobs(self, namespace: str, selector: str = "") -> list[dict]:
        query = f"?labelSelector={quote(selector)}" if selector else ""
        return self.kube.get(self.jobs_path(namespace) + query, timeout=120)["items"]

    def set_job_phases(self, namespace: str, phases: dict[str, str], threads: int = 8) -> None:
        """Write each job's ``status.state.phase`` through the status subresource.

        Stands in for Volcano's controller having run the job to that end, without running
        it: for jobs nobody here waits on, only their presence in the namespace matters.
        """
        path = self.jobs_path(namespace)

        def one(item: tuple[str, str]) -> None:
            name, phase = item
            patch = {"status": {"state": {"phase": phase}}}
            self.kube.request(
                "PATCH",
                f"{path}/{name}/status",
                patch,
                timeout=30,
                content_type="application/merge-patch+json",
            )

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, phases.items()))

    def wait_phase(
        self, namespace: str, count: int, phases: set[str], timeout: float, say=None
    ) -> dict[str, int]:
        deadline = time.monotonic() + timeout
        last = 0.0
        while True:
            jobs = self.list_jobs(namespace)
            by_phase: dict[str, int] = {}
            for job in jobs:
                phase = (job.get("status") or {}).get("state", {}).get("phase", "") or "-"
                by_phase[phase] = by_phase.get(phase, 0) + 1
            done = sum(n for p, n in by_phase.items() if p in phases)
            if done >= count:
                return by_phase
            if time.monotonic() > deadline:
                raise TimeoutError(f"{done}/{count} jobs in {phases} after {timeout}s: {by_phase}")
            if say and time.monotonic() - last > 10:
                say(f"  waiting: {by_phase}")
                last = time.monotonic()
            time.sleep(2)

    def count_running_pods(self, namespace: str) -> int:
        query = "?fieldSelector=status.phase%3DRunning"
        path = f"/api/v1/namespaces/{namespace}/pods{query}"
        return len(self.kube.get(path, timeout=120)["items"])

    def metrics(self) -> str:
        return self.kube.get("/metrics", timeout=30).get("raw", "")


def tiny_job(
    name: str,
    duration: float,
    *,
    cpu: str = "10m",
    memory: str = "16Mi",
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    """One task, one pod, tiny requests: as many fit on the simulated nodes as pods are allowed."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "master",
                    "replicas": 1,
                    "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
                    "template": {
                        "metadata": {"annotations": {SIM_DURATION: f"{duration:.1f}"}},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "master",
                                    "image": "example.org/bench:1",
                                    "resources": {"requests": {"cpu": cpu, "memory": memory}},
                                }
                            ],
                        },
                    },
                }
            ],
        },
    }


def managed_job(
    name: str,
    duration: float,
    *,
    run_id: str,
    index: int,
    exit_code: int = 0,
    workers: int = 0,
) -> dict[str, Any]:
    """A tiny job labelled and annotated as the operator submits one (try 1 of a mapped task
    instance), so the provider's watch, narrowed to its own jobs, sees it.

    Its pod templates carry the pod labels the operator's rendered jobs put on theirs
    (``TaskInstanceIdentity.pod_labels``: ``app.kubernetes.io/managed-by`` and the task
    instance's, with the try), so a waiter that selects pods by them sees these pods.
    ``workers`` adds a ``worker`` task of that many replicas beside the master (master 1 +
    worker 2 is the seed template's gang), all placed together (``minAvailable``); they "run"
    a minute longer than the master, whose end ends the job.

    A non-zero ``exit_code`` makes the master's pod fail and, as with the integration tests'
    failing template, ``PodFailed -> TerminateJob`` makes that the job's end (``Terminated``).
    """
    identity = TaskInstanceIdentity("bench", "train", run_id, map_index=index)
    body = tiny_job(name, duration, labels=identity.labels())
    body["metadata"]["annotations"] = identity.annotations(try_number=1)
    master = body["spec"]["tasks"][0]
    master["template"]["metadata"]["labels"] = identity.pod_labels(try_number=1)
    if workers:
        worker = copy.deepcopy(master)
        worker.update(name="worker", replicas=workers)
        worker.pop("policies")
        worker["template"]["metadata"]["annotations"][SIM_DURATION] = f"{duration + 60:.1f}"
        worker["template"]["spec"]["containers"][0]["name"] = "worker"
        body["spec"]["tasks"].append(worker)
        body["spec"]["minAvailable"] = 1 + workers
    if exit_code:
        master["template"]["metadata"]["annotations"][EXIT_CODE_ANNOTATION] = str(exit_code)
        body["spec"]["policies"] = [{"event": "PodFailed", "action": "TerminateJob"}]
    return body


def other_owner_job(name: str) -> dict[str, Any]:
    """A job someone else submitted: no ``managed-by`` label of ours."""
    return tiny_job(name, 60, labels={"app.kubernetes.io/managed-by": "someone-else"})


# ---- apiserver metrics: apiserver_metrics.py (re-exported here) ----------------------

from apiserver_metrics import (  # noqa: E402, F401  (the scenarios import them from here)
    READ_VERBS,
    api_counters,
    job_api_counters,
    parse_metrics,
    rates,
    reads,
    request_key,
    waiter_resource,
)

# ---- statistics ------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): with n < 100 samples, p99 is the maximum."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(values: list[float], digits: int = 4) -> dict[str, Any]:
    if not values:
        return {"median": None, "p99": None, "n": 0}
    return {
        "median": round(statistics.median(values), digits),
        "p99": round(percentile(values, 99), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "n": len(values),
    }


def parse_k8s_time(value: str | None) -> float | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def airflow_env(home: Path, kubeconfig: Path) -> dict[str, str]:
    """Environment for a process that imports Airflow: an isolated home and the connection."""
    env = dict(os.environ)
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES_REGEXP": "airflow_volcano_wandb.*",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
            ),
            "WANDB_MODE": "offline",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
        }
    )
    return env

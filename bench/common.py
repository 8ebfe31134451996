"""What every scenario shares: the local cluster through the harness's own admin client (stdlib
only, so the orchestrating process stays light and its requests are easy to tell apart from the
measured process's), job bodies, statistics, and the child processes a scenario measures in."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace
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
BENCH_NODE_PREFIX = 900  # extra KWOK nodes are kwok-gpu-node-900, -901, ...
PODS_PER_NODE = 110
RESULTS = REPO / "bench" / "results"
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"
PY = sys.executable
#: The benchmark run's start: run_all.py imports this module first.
T0 = time.monotonic()


def say(message: str) -> None:
    """One progress line of the benchmark run, with the seconds since it started."""
    print(f"[bench {time.monotonic() - T0:6.0f}s] {message}", flush=True)


class Cluster:
    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir.resolve()
        state = json.loads((self.state_dir / "state.json").read_text())
        self.server: str = state["server"]
        self.real_node = bool(state.get("real_node"))
        self.port = int(state["ports"]["apiserver"])
        self.kubeconfig = self.state_dir / "kubeconfig"
        self.kube: Kube = local_cluster.admin_client(self.state_dir, self.server)
        self.namespaces: list[str] = []

    def jobs_path(self, namespace: str) -> str:
        return f"/apis/{GROUP}/{VERSION}/namespaces/{namespace}/{PLURAL}"

    def create_namespace(self, prefix: str) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.kube.request("POST", "/api/v1/namespaces", body)
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

    def wait_namespaces_gone(self, timeout: float = 120, names: list[str] | None = None) -> bool:
        """Wait until these namespaces are gone, their pods with them (by default every one
        this run made, deleted first)."""
        deadline = time.monotonic() + timeout
        if names is None:
            names = self.namespaces
            for name in names:
                self.delete_namespace(name)
        while time.monotonic() < deadline:
            if all(self.kube.get_or_none(f"/api/v1/namespaces/{n}") is None for n in names):
                return True
            time.sleep(1)
        return False

    def ensure_pod_capacity(self, pods: int) -> list[str]:
        """Add simulated nodes until the cluster holds ``pods`` more pods; return their names."""
        nodes = self.kube.get("/api/v1/nodes")["items"]
        # A tainted node (the real node: NoSchedule) takes none of the bench's pods.
        free = sum(
            int(n["status"].get("allocatable", {}).get("pods", "0"))
            for n in nodes
            if not n["spec"].get("taints")
        )
        used = len(self.kube.get("/api/v1/pods?fieldSelector=status.phase%3DRunning")["items"])
        missing, added, index = pods - (free - used), [], BENCH_NODE_PREFIX
        existing = {n["metadata"]["name"] for n in nodes}
        while missing > 0:
            body = manifests.node(index, gpus=8)
            index += 1
            if body["metadata"]["name"] not in existing:
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

    def uids(self, namespace: str, selector: str) -> dict[str, str]:
        """The named jobs' uids: what the operator knows of each after submitting it."""
        return {
            j["metadata"]["name"]: j["metadata"]["uid"] for j in self.list_jobs(namespace, selector)
        }

    def set_job_phases(self, namespace: str, phases: dict[str, str], threads: int = 8) -> None:
        """Write each job's ``status.state.phase`` through the status subresource: Volcano's
        controller having run the job to that end, without running it (for jobs nobody here
        waits on, only their presence in the namespace matters)."""
        path = self.jobs_path(namespace)

        def one(item: tuple[str, str]) -> None:
            patch = {"status": {"state": {"phase": item[1]}}}
            mime = "application/merge-patch+json"
            self.kube.request(
                "PATCH", f"{path}/{item[0]}/status", patch, timeout=30, content_type=mime
            )

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, phases.items()))

    def wait_phase(
        self, namespace: str, count: int, phases: set[str], timeout: float, say=None
    ) -> dict[str, int]:
        deadline, last = time.monotonic() + timeout, 0.0
        while True:
            by_phase: dict[str, int] = {}
            for job in self.list_jobs(namespace):
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

    def pods(self, namespace: str, query: str = "") -> list[dict]:
        return self.kube.get(f"/api/v1/namespaces/{namespace}/pods{query}", timeout=120)["items"]

    def metrics(self) -> str:
        return self.kube.get("/metrics", timeout=30).get("raw", "")


def tiny_job(name: str, duration: float, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """One task, one pod, tiny requests: as many fit on the simulated nodes as pods are allowed."""
    container = {
        "name": "master",
        "image": "example.org/bench:1",
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}},
    }
    master = {
        "name": "master",
        "replicas": 1,
        "policies": [{"event": "TaskCompleted", "action": "CompleteJob"}],
        "template": {
            "metadata": {"annotations": {SIM_DURATION: f"{duration:.1f}"}},
            "spec": {"restartPolicy": "Never", "containers": [container]},
        },
    }
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [master]},
    }


def managed_job(
    name: str, duration: float, *, run_id: str, index: int, exit_code: int = 0, workers: int = 0
) -> dict[str, Any]:
    """A tiny job labelled and annotated as the operator submits one (try 1 of a mapped task
    instance), so the provider's watch, narrowed to its own jobs, sees it; its pod templates
    carry the operator's pod labels (``TaskInstanceIdentity.pod_labels``), so a waiter that
    selects pods by them sees these pods.

    ``workers`` adds a ``worker`` task of that many replicas beside the master (master 1 +
    worker 2 is the seed template's gang), all placed together (``minAvailable``); they "run"
    a minute longer than the master, whose end ends the job. A non-zero ``exit_code`` fails
    the master's pod and, by ``PodFailed -> TerminateJob``, the job (``Terminated``)."""
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


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): with n < 100 samples, p99 is the maximum."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


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
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() if value else None


def airflow_env(home: Path, kubeconfig: Path) -> dict[str, str]:
    """Environment for a process that imports Airflow: an isolated home and the connection."""
    env = dict(os.environ)
    conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
    env.update(
        AIRFLOW_HOME=str(home),
        AIRFLOW__CORE__DAGS_FOLDER=str(home / "dags"),
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES_REGEXP="airflow_volcano_wandb.*",
        AIRFLOW__LOGGING__LOGGING_LEVEL="WARNING",
        AIRFLOW_CONN_KUBERNETES_DEFAULT=json.dumps(conn),
        WANDB_MODE="offline",
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH", "")])),
    )
    return env


def child(script: str, *args: Any, out: Path, env: dict | None = None, quiet: bool = False) -> Any:
    """Run ``bench/<script>`` with ``args`` and ``--out out`` in a child process (``env``: the
    bench's Airflow environment, where it needs one); what it wrote there, as JSON."""
    argv = [PY, str(REPO / "bench" / script), *map(str, args), "--out", str(out)]
    stdout = subprocess.DEVNULL if quiet else None
    subprocess.run(argv, env=env, check=True, stdout=stdout)
    return json.loads(out.read_text())


def trial(
    test: str, figures: str, env: dict[str, str], say, args: tuple = (), drop: tuple = ()
) -> tuple[dict | None, int]:
    """A reliability trial of ``tests/reliability/`` run as the bench's driver: pytest in a child
    process on this cluster (the benchmarks import nothing from ``tests/``); the figures it
    writes to ``test-artifacts/reliability/<figures>`` (None if none), and pytest's status."""
    path = REPO / "test-artifacts" / "reliability" / figures
    path.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", *drop))}
    say(f"running {test}")
    argv = [PY, "-m", "pytest", test, "-q", *args, "-p", "no:cacheprovider"]
    proc = subprocess.run(argv, cwd=REPO, env={**base, **env}, check=False)
    return (json.loads(path.read_text()) if path.exists() else None), proc.returncode


class TaskInstance(SimpleNamespace):
    """What the operator's ``execute()`` reads of a task instance, and where its XComs go."""

    def __init__(self, dag_id: str, run_id: str, map_index: int = -1, try_number: int = 1):
        super().__init__(dag_id=dag_id, task_id="train", run_id=run_id, map_index=map_index)
        self.try_number, self.log_url, self.xcoms = try_number, None, {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value

    def context(self) -> dict[str, Any]:
        return {"ti": self, "dag_run": SimpleNamespace(logical_date=None)}

"""What every scenario shares: the local cluster through the harness's own admin client (stdlib
only, so the orchestrating process's requests are easy to tell from the measured one's), job
bodies, statistics, and the child processes a scenario measures in."""

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
from collections.abc import Callable, Iterable
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
MERGE_PATCH = "application/merge-patch+json"
#: The benchmark run's start: run_all.py imports this module first.
T0 = time.monotonic()


def say(message: str) -> None:
    """One progress line of the benchmark run, with the seconds since it started."""
    print(f"[bench {time.monotonic() - T0:6.0f}s] {message}", flush=True)


def wait_until(ready: Callable[[], Any], timeout: float, what: str, every: float = 0.5) -> Any:
    """``ready()``'s first true answer, asked every ``every`` s; TimeoutError after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not (answer := ready()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(every)
    return answer


def phase(job: dict) -> str:
    return ((job.get("status") or {}).get("state") or {}).get("phase", "")


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
        """A new namespace, once its default service account is there (a pod needs it)."""
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self.kube.request("POST", "/api/v1/namespaces", body)
        account = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        wait_until(lambda: self.kube.get_or_none(account), 60, f"{name}'s service account", 0.2)
        self.namespaces.append(name)
        return name

    def delete_namespace(self, name: str) -> None:
        try:
            self.kube.request("DELETE", f"/api/v1/namespaces/{name}")
        except KubeError as err:
            if err.status != 404:
                raise

    def wait_namespaces_gone(self, timeout: float = 120, names: list[str] | None = None) -> bool:
        """Whether these namespaces (by default every one this run made, deleted first) are
        gone within ``timeout``."""
        if names is None:
            names = self.namespaces
            for name in names:
                self.delete_namespace(name)
        paths = [f"/api/v1/namespaces/{n}" for n in names]
        try:
            return wait_until(lambda: not any(map(self.kube.get_or_none, paths)), timeout, "", 1)
        except TimeoutError:
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
            body, index = manifests.node(index, gpus=8), index + 1
            if (name := body["metadata"]["name"]) not in existing:
                self.kube.create("/api/v1/nodes", body)
                added, missing = [*added, name], missing - PODS_PER_NODE

        def ready(name: str) -> bool:
            conditions = self.kube.get(f"/api/v1/nodes/{name}")["status"].get("conditions", [])
            return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

        with contextlib.suppress(TimeoutError):
            wait_until(lambda: all(map(ready, added)), 60, "new nodes Ready")
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
                    break
                except KubeError as err:
                    if err.status == 409:
                        break
                    if attempt == 4:
                        raise
                    time.sleep(0.5 * (attempt + 1))
            return time.time()

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(one, bodies))

    def start_jobs(self, namespace: str, bodies: list[dict], timeout: float = 600) -> dict:
        """Create the jobs, wait until Volcano runs every one: the seconds to both, the pods
        Running, and the jobs as the operator knows them after submitting (name, uid)."""
        t = time.monotonic()
        self.create_jobs(namespace, bodies)
        created_s = time.monotonic() - t
        self.wait_phase(namespace, len(bodies), {"Running"}, timeout=timeout)
        running_s = time.monotonic() - t
        uids = {j["metadata"]["name"]: j["metadata"]["uid"] for j in self.list_jobs(namespace)}
        running = self.pods(namespace, "?fieldSelector=status.phase%3DRunning")
        jobs = [{"name": n, "uid": uids[n]} for n in (b["metadata"]["name"] for b in bodies)]
        return {"created_s": created_s, "running_s": running_s, "pods": len(running), "jobs": jobs}

    def list_jobs(self, namespace: str, selector: str = "") -> list[dict]:
        query = f"?labelSelector={quote(selector)}" if selector else ""
        return self.kube.get(self.jobs_path(namespace) + query, timeout=120)["items"]

    def set_job_phases(self, namespace: str, phases: dict[str, str], threads: int = 8) -> None:
        """Write each job's ``status.state.phase`` through the status subresource: Volcano's
        controller having run the job to that end, without running it."""
        path = self.jobs_path(namespace)

        def one(item: tuple[str, str]) -> None:
            patch = {"status": {"state": {"phase": item[1]}}}
            url = f"{path}/{item[0]}/status"
            self.kube.request("PATCH", url, patch, timeout=30, content_type=MERGE_PATCH)

        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(one, phases.items()))

    def wait_phase(self, namespace: str, count: int, phases: set[str], timeout: float) -> None:
        """Until ``count`` jobs are in one of ``phases``, saying how many are where every 10 s."""
        deadline, last = time.monotonic() + timeout, time.monotonic()
        while True:
            by_phase: dict[str, int] = {}
            for job in self.list_jobs(namespace):
                by_phase[phase(job) or "-"] = by_phase.get(phase(job) or "-", 0) + 1
            done = sum(n for p, n in by_phase.items() if p in phases)
            if done >= count:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{done}/{count} jobs in {phases} after {timeout}s: {by_phase}")
            if time.monotonic() - last > 10:
                say(f"  waiting: {by_phase}")
                last = time.monotonic()
            time.sleep(2)

    def pods(self, namespace: str, query: str = "") -> list[dict]:
        return self.kube.get(f"/api/v1/namespaces/{namespace}/pods{query}", timeout=120)["items"]

    def metrics(self) -> str:
        return self.kube.get("/metrics", timeout=30).get("raw", "")


def tiny_job(name: str, duration: float, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """One task, one pod, tiny requests: as many fit on the simulated nodes as pods are allowed."""
    resources = {"requests": {"cpu": "10m", "memory": "16Mi"}}
    container = {"name": "master", "image": "example.org/bench:1", "resources": resources}
    spec = {"restartPolicy": "Never", "containers": [container]}
    template = {"metadata": {"annotations": {SIM_DURATION: f"{duration:.1f}"}}, "spec": spec}
    policies = [{"event": "TaskCompleted", "action": "CompleteJob"}]
    master = {"name": "master", "replicas": 1, "policies": policies, "template": template}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {"schedulerName": "volcano", "minAvailable": 1, "tasks": [master]},
    }


def managed_job(
    name: str, duration: float, *, run_id: str, index: int, exit_code: int = 0, workers: int = 0
) -> dict[str, Any]:
    """A tiny job (and pods) labelled as the operator's try 1 of a mapped task instance, so the
    provider's watches see it; ``workers`` beside the master, placed together, end a minute
    after it; a non-zero ``exit_code`` fails the master's pod, and so the job."""
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
    figures = {"median": statistics.median(values), "p99": percentile(values, 99)}
    figures |= {"min": min(values), "max": max(values)}
    return {**{k: round(v, digits) for k, v in figures.items()}, "n": len(values)}


class NotMeasured(LookupError):
    """A figure a goal needs is missing or None: the goal reads "not measured", never "met"."""


def measured(value: Any) -> Any:
    """``value``, for a goal to judge; :class:`NotMeasured` where it is None."""
    if value is None:
        raise NotMeasured("a figure is None")
    return value


#: The finest step of the clocks a latency is read from (``time.time()`` on one host, a
#: watch's event): a median below it, or below the run's own noise, divides nothing.
CLOCK_RESOLUTION_S = 0.001


def latency_summary(values: list[float], digits: int = 4) -> dict[str, Any]:
    """``summary`` of the latencies that can be: a negative one means the reference clock (an
    observer's watch event) lagged, a clock-skew finding (``clock_skew``: how many, the worst)
    kept apart, not averaged in."""
    skewed = [v for v in values if v < 0]
    figures = summary([v for v in values if v >= 0], digits)
    if skewed:
        figures["clock_skew"] = {"n": len(skewed), "min": round(min(skewed), digits)}
    return figures


def noise_s(figures: dict[str, Any]) -> float:
    """A latency run's noise: the clocks' resolution, or the worst skew it found."""
    return max(CLOCK_RESOLUTION_S, -figures.get("clock_skew", {}).get("min", 0.0))


def ratio(numerator: float | None, denominator: float | None, noise: float) -> float | str | None:
    """``numerator / denominator``, or "below resolution" where the denominator is within the
    run's ``noise``: a ratio over noise is noise, however large it reads."""
    if numerator is None or denominator is None:
        return None
    if denominator <= noise:
        return "below resolution"
    return round(numerator / denominator, 1)


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
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL if quiet else None)
    return json.loads(out.read_text())


def trial(
    test: str, figures: str, env: dict[str, str], say, args: tuple = (), drop: tuple = ()
) -> tuple[dict | None, int]:
    """A trial of ``tests/reliability/`` as the driver, pytest in a child process (the bench
    imports nothing from ``tests/``): the figures it writes (or None), and its status."""
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


def table(head: str, *rows: Iterable[Any]) -> list[str]:
    """A markdown table: ``head``'s cells split at ``|``, then each row's cells."""
    cells = [cell.strip() for cell in head.split("|")]
    lines = ["| " + " | ".join(cells) + " |", "|" + "---|" * len(cells)]
    return lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows]

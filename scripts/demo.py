"""`make demo`: run the manual example DAG on the local Volcano cluster and show the result.

Uses `airflow dags test` (a real Airflow metadata DB under .state/airflow, no scheduler), the
local cluster's admin kubeconfig as the `kubernetes_default` connection, and W&B offline.

The report lists every rank as it was placed. Listing pods at the end would show only the
master: Volcano's CompleteJob policy deletes the other pods when the master completes, so the
pods are recorded by a watch while the job runs.

With ``--real-pods`` (``make demo REAL_PODS=1``, on a cluster started with ``--real-node``)
the ranks run for real on the cluster's real node, from the trainer image built there: the
DAG's template is placed on that node (``real_node.place_on_real_node``), and the run's final
metrics are read back from the W&B files the master wrote offline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airflow_volcano_wandb.job.ownership import REPORTED_ANNOTATION
from airflow_volcano_wandb.testing.cluster import cluster as local_cluster
from airflow_volcano_wandb.testing.cluster import image, wandb_offline
from airflow_volcano_wandb.testing.cluster import placement as real_node
from airflow_volcano_wandb.testing.recorder import Recorder
from airflow_volcano_wandb.wait.training_progress import Progress, progress_line

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "volcano_pytorch_manual"
TEMPLATE = "templates/volcano-pytorch-manual.yaml"
JOB_LABEL = "volcano.sh/job-name"
TASK_LABEL = "volcano.sh/task-spec"


@dataclass(frozen=True)
class Placement:
    """One rank of a Volcano job, as the scheduler placed it."""

    job: str
    pod: str
    task: str
    node: str
    rank: str | None
    world_size: str | None

    def line(self) -> str:
        return (
            f"  pod {self.pod:40} task={self.task:8} node={self.node:18} "
            f"RANK={self.rank} WORLD_SIZE={self.world_size}"
        )


def placement(pod: Any) -> Placement | None:
    """The placement of a pod the scheduler has bound to a node (``None`` before that)."""
    if not pod.spec.node_name:
        return None
    labels = pod.metadata.labels or {}
    # Volcano's pytorch plugin writes RANK/WORLD_SIZE as literal env values of each container.
    env = {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value}
    return Placement(
        job=labels.get(JOB_LABEL, "?"),
        pod=pod.metadata.name,
        task=labels.get(TASK_LABEL, "?"),
        node=pod.spec.node_name,
        rank=env.get("RANK"),
        world_size=env.get("WORLD_SIZE"),
    )


def placements(pods: list[Any], job: str) -> list[Placement]:
    """The job's ranks in rank order (pods without a RANK last, by name)."""
    placed = [p for p in map(placement, pods) if p is not None and p.job == job]
    return sorted(placed, key=lambda p: (p.rank is None, int(p.rank or 0), p.pod))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster-dir", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--namespace", default="wandb")
    # check-wheel runs the example DAGs from a copy, against the installed wheel.
    parser.add_argument("--dags-folder", type=Path, default=REPO / "dags")
    parser.add_argument(
        "--real-pods",
        action="store_true",
        help="train on the cluster's real node (cluster started with --real-node)",
    )
    args = parser.parse_args()

    kubeconfig = args.cluster_dir / "kubeconfig"
    airflow_home = args.state_dir / "airflow"
    airflow_home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(args.dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        ),
        "AIRFLOW_CONN_WANDB_DEFAULT": json.dumps(
            {"conn_type": "wandb", "extra": {"entity": "demo", "project": "volcano-ddp"}}
        ),
        "WANDB_MODE": "offline",
        # The manual DAG only submits to namespaces the deployment allows (docs/security.md).
        "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES": args.namespace,
        # `airflow dags test` runs the trigger in its own process: no defer-exit race to wait
        # out (docs/troubleshooting.md).
        "AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS": "0",
    }
    api = _api(kubeconfig)
    _ensure_namespace(api, args.namespace)
    wandb_dir = None
    if args.real_pods:
        cluster_dir = args.cluster_dir.resolve()
        server = json.loads((cluster_dir / "state.json").read_text())["server"]
        kube = local_cluster.admin_client(cluster_dir, server)
        wandb_dir = real_node.wandb_dir(kube, cluster_dir, args.namespace)
        template = yaml.safe_load((args.dags_folder / TEMPLATE).read_text())
        env.update(
            {
                # Deployment config, as a real deployment would set it: the DAG's template
                # placed on the real node, and the image built there allowed.
                "AIRFLOW__VOLCANO_PYTORCH_MANUAL__TEMPLATE": json.dumps(
                    real_node.place_on_real_node(template)
                ),
                "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_IMAGES": image.TRAINER_IMAGE,
                "AIRFLOW__VOLCANO_PYTORCH_MANUAL__DEFAULT_IMAGE": image.TRAINER_IMAGE,
                "AIRFLOW__VOLCANO_PYTORCH_MANUAL__FOLLOW_MASTER_LOG": "True",
            }
        )

    print("== airflow db migrate", flush=True)
    subprocess.run(
        [sys.executable, "-m", "airflow", "db", "migrate"],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    conf = {
        "worker_replicas": args.workers,
        "namespace": args.namespace,
        "wandb_entity": "demo",
        "wandb_project": "volcano-ddp",
    }
    if args.real_pods:
        conf["image_uri"] = image.TRAINER_IMAGE
    print(f"== airflow dags test {DAG_ID} -c '{json.dumps(conf)}'", flush=True)
    # Recorded while the DAG runs: the sensor deletes the completed job, and Volcano's
    # CompleteJob the worker pods, so a list at the end would show neither.
    with Recorder.pods(api, args.namespace) as pods, Recorder.jobs(api, args.namespace) as jobs:
        result = subprocess.run(
            [sys.executable, "-m", "airflow", "dags", "test", DAG_ID, "-c", json.dumps(conf)],
            env=env,
            capture_output=True,
            text=True,
        )
    log_path = args.state_dir / "demo-dags-test.log"
    log_path.write_text(result.stdout + result.stderr)
    print(f"   full log: {log_path}")
    code = _report(args.namespace, result, log_path, pods.seen(), jobs.seen())
    if wandb_dir is not None:
        code = max(code, _report_real_run(result.stdout + result.stderr, pods.seen(), wandb_dir))
    return code


def _run_id(pods: list[Any]) -> str | None:
    for pod in pods:
        for var in pod.spec.containers[0].env or []:
            if var.name == "WANDB_RUN_ID" and var.value:
                return var.value
    return None


def _report_real_run(log: str, pods: list[Any], wandb_dir: Path) -> int:
    """What the ranks printed into the task log, and the run's metrics from its W&B files."""
    # What the trainer printed, without the log record around it.
    lines = re.findall(r"(\[rank \d+/\d+\] .*?)(?: \[airflow_volcano_wandb\.\S+\].*)?$", log, re.M)
    print(f"\nThe master's log, followed into the wait task's log ({len(lines)} lines):")
    for line in lines[-12:]:
        print(f"  {line}")
    # The progress contract's records (docs/trainer.md), as the task log words them.
    records = re.findall(r"(AVW_PROGRESS \{.*?\})", log)
    progress = [p for record in records if (p := Progress.of_log_line(record, 0.0))]
    print(f"Progress the trainer reported ({len(progress)} records):")
    for report in progress:
        print(f"  {progress_line(report, None)}")
    run_id = _run_id(pods)
    run_file = wandb_offline.find_run_file(wandb_dir, run_id) if run_id else None
    if run_file is None:
        print(f"W&B offline run {run_id}: NO FILES under {wandb_dir}")
        return 1
    metrics = {k: v for k, v in sorted(wandb_offline.summary(run_file).items()) if k[0] != "_"}
    print(f"W&B offline run {run_id}, final summary ({run_file}):")
    for key, value in metrics.items():
        print(f"  {key} = {value}")
    return 0 if progress else 1


def _report(
    namespace: str,
    result: subprocess.CompletedProcess,
    log_path: Path,
    pods: list[Any],
    jobs: list[dict[str, Any]],
) -> int:
    managed = "app.kubernetes.io/managed-by"
    jobs = [j for j in jobs if j["metadata"].get("labels", {}).get(managed)]
    jobs.sort(key=lambda j: j["metadata"]["creationTimestamp"])
    if not jobs:
        print("No job was submitted; see the log above.")
        return 1
    job = jobs[-1]
    name = job["metadata"]["name"]
    state = job.get("status", {}).get("state", {})
    cause = ": ".join(part for part in (state.get("reason"), state.get("message")) if part)
    print(
        f"\nVolcano job {namespace}/{name}: {state.get('phase')}"
        + (f" ({cause})" if cause else "")
        + (
            " (then deleted by the sensor: nothing is left)"
            if state.get("phase") == "Completed"
            else ""
        )
    )
    ranks = placements(pods, name)
    # Every rank was seen when each one reports the number of ranks recorded as its world size.
    all_ranks = bool(ranks) and all(r.world_size == str(len(ranks)) for r in ranks)
    print(f"{len(ranks)} ranks, as placed" + ("" if all_ranks else " (SOME RANKS MISSING)") + ":")
    for rank in ranks:
        print(rank.line())
    found = re.search(r"W&B run: (\S+)", result.stdout + result.stderr)
    url = found.group(1) if found else None
    print(f"W&B run URL: {url or 'not found in the log'}")
    # What keeps a cleared task from counting this job as its own result (docs/reliability.md).
    reported_by = (job["metadata"].get("annotations") or {}).get(REPORTED_ANNOTATION)
    print(f"Marked as reported by try: {reported_by or 'NOT MARKED'}")
    ok = (
        result.returncode == 0
        and state.get("phase") == "Completed"
        and all_ranks
        and reported_by is not None
    )
    print("\nDemo " + ("succeeded" if ok else f"FAILED (see {log_path})"))
    return 0 if ok else 1


def _api(kubeconfig: Path):
    from kubernetes import config

    return config.new_client_from_config(config_file=str(kubeconfig))


def _ensure_namespace(api, namespace: str) -> None:
    from kubernetes import client as k8s
    from kubernetes.client.rest import ApiException

    try:
        k8s.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
    except ApiException as exc:
        if exc.status != 409:
            raise


if __name__ == "__main__":
    sys.exit(main())

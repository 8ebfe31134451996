"""Bench ``real_pods``: the manual DAG (``scripts/demo.py --real-pods``: master + 2 workers,
DDP over gloo) trained for real on the local cluster's real node, run by ``make bench
REAL_PODS=1`` (on a cluster without it the scenario says so and keeps the figures it had):
pods ready after the job's creation, the master's run, the job's ``Completed`` to the wait
task's end, the trainer image's size and recorded cold build (timestamps in whole seconds).
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from common import REPO, say

KEYS = ("real_pods",)
NEEDS = "cluster"
NAMESPACE = "wandb"


def _utc(value: Any) -> float:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value.astimezone(timezone.utc).timestamp()


def _wait_task_end(state_dir: Path) -> float:
    db = sqlite3.connect(state_dir / "airflow" / "airflow.db")
    (end,) = db.execute(
        "SELECT end_date FROM task_instance WHERE dag_id = 'volcano_pytorch_manual' "
        "AND task_id = 'wait' ORDER BY end_date DESC LIMIT 1"
    ).fetchone()
    return _utc(datetime.fromisoformat(end).replace(tzinfo=timezone.utc))


def run(ctx) -> dict | None:
    from kubernetes import config

    from airflow_volcano_wandb.testing.cluster import image
    from airflow_volcano_wandb.testing.recorder import Recorder

    if not ctx.cluster.real_node:
        say("real_pods: the cluster has no real node (make bench REAL_PODS=1): not run")
        return None
    state_dir = ctx.work / "real-pods"
    api = config.new_client_from_config(config_file=str(ctx.cluster.kubeconfig))
    with Recorder.pods(api, NAMESPACE) as pods, Recorder.jobs(api, NAMESPACE) as jobs:
        argv = [sys.executable, str(REPO / "scripts" / "demo.py"), "--real-pods"]
        argv += ["--cluster-dir", str(ctx.cluster.state_dir), "--state-dir", str(state_dir)]
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    job = sorted(jobs.seen(), key=lambda j: j["metadata"]["creationTimestamp"])[-1]
    name = job["metadata"]["name"]
    created = _utc(job["metadata"]["creationTimestamp"])
    completed = _utc(job["status"]["state"]["lastTransitionTime"])
    ranks = [p for p in pods.seen() if p.metadata.name.startswith(name)]
    states = {pod.metadata.name: pod.status.container_statuses[0].state for pod in ranks}
    started = {n: _utc((s.terminated or s.running).started_at) for n, s in states.items()}
    finished = {n: _utc(s.terminated.finished_at) for n, s in states.items() if s.terminated}
    master = f"{name}-master-0"
    record = image.build_record(image.base_layer_path())  # the cold build's, if recorded
    cold = json.loads(record.read_text())["seconds"] if record.exists() else None
    figures = {
        "image_build_s_cold": cold,
        "image_mb": round(image.trainer_image().stat().st_size / 2**20),
        "pods_ready_s": round(max(started.values()) - created, 1),
        "train_s": round(finished[master] - started[master], 1),
        "completion_to_task_success_s": round(_wait_task_end(state_dir) - completed, 1),
        "ranks": len(ranks),
        "job": f"{NAMESPACE}/{name}",
    }
    return {"real_pods": figures}


def section(r: dict) -> list[str]:
    p = r["real_pods"]
    return [
        "`bench/real_pods.py`: the manual DAG's master + 2 workers trained for real (DDP over "
        f"gloo): pods ready {p['pods_ready_s']} s after the job was created, the master "
        f"trained {p['train_s']} s, the wait task succeeded {p['completion_to_task_success_s']} "
        "s after the job's `Completed`"
        + (f"; trainer image {p['image_mb']} MB" if p.get("image_mb") else "")
        + (f", cold image build {p['image_build_s_cold']} s" if p.get("image_build_s_cold") else "")
        + ".",
    ]

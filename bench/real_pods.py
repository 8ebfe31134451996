"""Bench ``real_pods``: the manual DAG trained for real on the local cluster's real node.

    .venv/bin/python -m airflow_volcano_wandb.testing.cluster up --state-dir DIR --real-node
    .venv/bin/python bench/real_pods.py --cluster-dir DIR [--state-dir S] [--cold-image]
        [--record [bench/results]]

Runs ``scripts/demo.py --real-pods`` (master + 2 workers, DDP over gloo) while watching the
namespace, then prints one JSON object:

- ``image_build_s_cold``: the trainer image's cold build (mmdebstrap + pip, the base layer),
  as recorded when it was built; ``--cold-image`` builds it again into a fresh cache first;
- ``image_mb``: the docker-archive tar imported into the node's containerd;
- ``pods_ready_s``: job created -> the last of the 3 containers started;
- ``train_s``: the master container's run (start -> exit);
- ``completion_to_task_success_s``: the job's ``Completed`` -> the wait task's end in the
  Airflow DB (the sensor's verdict, through the triggerer).

Kubernetes timestamps have a resolution of one second. A script that prints figures: nothing
here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kubernetes import config  # noqa: E402

from airflow_volcano_wandb.testing.cluster import image  # noqa: E402
from airflow_volcano_wandb.testing.recorder import Recorder  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_file  # noqa: E402  (beside this file: the results file every scenario writes)

NAMESPACE = "wandb"


def _cold_image_seconds(rebuild: bool) -> float | None:
    if rebuild:
        with tempfile.TemporaryDirectory() as cache:
            started = time.monotonic()
            subprocess.run(
                [
                    sys.executable,
                    "-c",
                    "from airflow_volcano_wandb.testing.cluster import "
                    "image; image.trainer_image()",
                ],
                env={**os.environ, "AVW_CACHE_DIR": cache},
                check=True,
            )
            return round(time.monotonic() - started, 1)
    record = image.build_record(image.base_layer_path())
    return json.loads(record.read_text())["seconds"] if record.exists() else None


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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster-dir", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, default=Path(tempfile.mkdtemp(prefix="avw-rp-")))
    parser.add_argument("--cold-image", action="store_true")
    results_file.add_record_option(parser)
    args = parser.parse_args()
    load = results_file.load_before()

    api = config.new_client_from_config(config_file=str(args.cluster_dir / "kubeconfig"))
    with Recorder.pods(api, NAMESPACE) as pods, Recorder.jobs(api, NAMESPACE) as jobs:
        subprocess.run(
            [
                sys.executable,
                str(REPO / "scripts" / "demo.py"),
                "--real-pods",
                "--cluster-dir",
                str(args.cluster_dir),
                "--state-dir",
                str(args.state_dir),
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    job = sorted(jobs.seen(), key=lambda j: j["metadata"]["creationTimestamp"])[-1]
    name = job["metadata"]["name"]
    created = _utc(job["metadata"]["creationTimestamp"])
    completed = _utc(job["status"]["state"]["lastTransitionTime"])
    ranks = [p for p in pods.seen() if p.metadata.name.startswith(name)]
    started, finished = {}, {}
    for pod in ranks:
        state = pod.status.container_statuses[0].state
        run = state.terminated or state.running
        started[pod.metadata.name] = _utc(run.started_at)
        if state.terminated:
            finished[pod.metadata.name] = _utc(state.terminated.finished_at)
    master = f"{name}-master-0"
    archive = image.trainer_image()
    figures = {
        "image_build_s_cold": _cold_image_seconds(args.cold_image),
        "image_mb": round(archive.stat().st_size / 2**20),
        "pods_ready_s": round(max(started.values()) - created, 1),
        "train_s": round(finished[master] - started[master], 1),
        "completion_to_task_success_s": round(_wait_task_end(args.state_dir) - completed, 1),
        "ranks": len(ranks),
        "job": f"{NAMESPACE}/{name}",
    }
    print(json.dumps(figures, indent=2))
    if args.record:
        how = "bench/real_pods.py" + (" --cold-image" if args.cold_image else "")
        meta = results_file.scenario_meta(load, how=how)
        results_file.record("real_pods", {"real_pods": figures}, meta, args.record)
    return 0


if __name__ == "__main__":
    sys.exit(main())

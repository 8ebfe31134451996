"""`make demo`: run the manual example DAG on the local Volcano cluster and show the result.

Uses `airflow dags test` (a real Airflow metadata DB under .state/airflow, no scheduler), the
local cluster's admin kubeconfig as the `kubernetes_default` connection, and W&B offline.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DAG_ID = "volcano_pytorch_manual"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster-dir", type=Path, required=True)
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--namespace", default="wandb")
    args = parser.parse_args()

    kubeconfig = args.cluster_dir / "kubeconfig"
    airflow_home = args.state_dir / "airflow"
    airflow_home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        ),
        "AIRFLOW_CONN_WANDB_DEFAULT": json.dumps(
            {"conn_type": "wandb", "extra": {"entity": "demo", "project": "volcano-ddp"}}
        ),
        "WANDB_MODE": "offline",
    }
    api = _api(kubeconfig)
    _ensure_namespace(api, args.namespace)

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
    print(f"== airflow dags test {DAG_ID} -c '{json.dumps(conf)}'", flush=True)
    result = subprocess.run(
        [sys.executable, "-m", "airflow", "dags", "test", DAG_ID, "-c", json.dumps(conf)],
        env=env,
        capture_output=True,
        text=True,
    )
    log_path = args.state_dir / "demo-dags-test.log"
    log_path.write_text(result.stdout + result.stderr)
    print(f"   full log: {log_path}")
    return _report(api, args.namespace, result, log_path)


def _report(api, namespace: str, result: subprocess.CompletedProcess, log_path: Path) -> int:
    from kubernetes import client as k8s

    jobs = k8s.CustomObjectsApi(api).list_namespaced_custom_object(
        "batch.volcano.sh",
        "v1alpha1",
        namespace,
        "jobs",
        label_selector="app.kubernetes.io/managed-by=airflow-volcano-wandb",
    )["items"]
    jobs.sort(key=lambda j: j["metadata"]["creationTimestamp"])
    if not jobs:
        print("No job was submitted; see the log above.")
        return 1
    job = jobs[-1]
    name = job["metadata"]["name"]
    state = job.get("status", {}).get("state", {})
    cause = ": ".join(part for part in (state.get("reason"), state.get("message")) if part)
    print(
        f"\nVolcano job {namespace}/{name}: {state.get('phase')}" + (f" ({cause})" if cause else "")
    )
    pods = (
        k8s.CoreV1Api(api)
        .list_namespaced_pod(namespace, label_selector=f"volcano.sh/job-name={name}")
        .items
    )
    for pod in sorted(pods, key=lambda p: p.metadata.name):
        env = {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value}
        print(
            f"  pod {pod.metadata.name:40} {pod.status.phase:10} node={pod.spec.node_name} "
            f"RANK={env.get('RANK')} WORLD_SIZE={env.get('WORLD_SIZE')}"
        )
    found = re.search(r"W&B run: (\S+)", result.stdout + result.stderr)
    url = found.group(1) if found else None
    print(f"W&B run URL: {url or 'not found in the log'}")
    ok = result.returncode == 0 and state.get("phase") == "Completed"
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

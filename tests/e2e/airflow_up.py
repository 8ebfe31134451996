"""``make airflow-up`` / ``airflow-down`` / ``airflow-status``: the tests' production-shaped
Airflow beside the local cluster, to try the example DAGs in its UI.

The reliability tests' stack (``test_support/airflow_runs.ha_stack``'s shape: PostgreSQL,
the API server, two schedulers, the DAG processor and two triggerers; under CeleryExecutor,
the default, also Redis and two Celery workers, each worker and triggerer with a log folder
and log server of its own; ``--executor local`` or EXECUTOR=local for LocalExecutor),
started detached in ``--state-dir`` (home, PostgreSQL data, logs and pid files), with the
example DAGs of ``dags/`` and the local cluster's admin kubeconfig as ``kubernetes_default``.
W&B runs offline. Every user is an admin (Airflow's simple auth manager): for this machine
only.

    python -m tests.e2e.airflow_up up --state-dir .state/airflow --cluster-dir .state/cluster \
        [--executor local]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from pathlib import Path

from kubernetes import client, config

from tests.e2e.airflow_stack import REPO, AirflowStack
from tests.e2e.executors import EXECUTORS, executor_from_env
from tests.e2e.postgres import PostgresServer, process_alive
from tests.e2e.redis_server import RedisServer

NAMESPACE = "airflow-up"  # the manual DAG's namespace here (the tests create "wandb" themselves)


def _stack(state_dir: Path, cluster_dir: Path, executor: str) -> AirflowStack:
    return AirflowStack(
        home=state_dir / "home",
        log_dir=state_dir / "logs",
        kubeconfig=cluster_dir / "kubeconfig",
        wandb_conn={"conn_type": "wandb", "extra": {"entity": "local", "project": "airflow-up"}},
        dags_folder=REPO / "dags",
        schedulers=2,
        triggerers=2,
        executor=executor,
        postgres_dir=state_dir / "postgres",
        detached=True,
        extra_env={
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES": NAMESPACE,
            "AIRFLOW__CORE__PARALLELISM": "2",
        },
    )


def _ensure_namespace(kubeconfig: Path) -> None:
    api = config.new_client_from_config(str(kubeconfig))
    try:
        with contextlib.suppress(client.ApiException):  # 409: it is there already
            client.CoreV1Api(api).create_namespace({"metadata": {"name": NAMESPACE}})
    finally:
        api.close()


def up(state_dir: Path, cluster_dir: Path, executor: str) -> None:
    if _pids(state_dir):
        print(f"airflow-up: already running in {state_dir} (make airflow-down first)")
        return
    if not (cluster_dir / "kubeconfig").exists():
        sys.exit(f"airflow-up: no local cluster in {cluster_dir} (make cluster-up)")
    state_dir.mkdir(parents=True, exist_ok=True)
    _ensure_namespace(cluster_dir / "kubeconfig")
    stack = _stack(state_dir, cluster_dir, executor)
    stack.start(timeout=600)
    (state_dir / "url").write_text(stack.base_url + "\n")
    print(f"Airflow UI: {stack.base_url} (every user is an admin; logs in {stack.log_dir})")
    print(f"PostgreSQL: {stack.postgres.url()}; components: {', '.join(stack.components)}")
    if stack.redis is not None:
        print(f"Redis (the Celery broker): {stack.redis.url()}")


def _pids(state_dir: Path) -> dict[str, int]:
    pids = {}
    for path in (state_dir / "home" / "run").glob("*.pid"):
        with contextlib.suppress(ValueError, OSError):
            pid = int(path.read_text().split()[0])
            os.kill(pid, 0)
            pids[path.stem] = pid
    return pids


def down(state_dir: Path) -> None:
    """SIGTERM every component's process group, SIGKILL what is left, stop PostgreSQL and
    Redis (if the stack ran Celery)."""
    pids = _pids(state_dir)
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(process_alive(pid) for pid in pids.values()):
        time.sleep(0.5)
    for pid in pids.values():
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    for path in (state_dir / "home" / "run").glob("*.pid"):
        path.unlink()
    PostgresServer(state_dir / "postgres" / "server").stop()
    RedisServer(state_dir / "home" / "redis").stop()
    print(f"airflow-down: stopped {len(pids)} components, PostgreSQL and Redis in {state_dir}")


def status(state_dir: Path) -> None:
    pids = _pids(state_dir)
    url = (state_dir / "url").read_text().strip() if (state_dir / "url").exists() else "?"
    postgres = PostgresServer(state_dir / "postgres" / "server").pid()
    redis = RedisServer(state_dir / "home" / "redis").pid()
    print(
        json.dumps({"url": url, "components": pids, "postgres": postgres, "redis": redis}, indent=2)
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--cluster-dir", type=Path, default=REPO / ".state" / "cluster")
    parser.add_argument("--executor", choices=tuple(EXECUTORS), default=None)
    args = parser.parse_args()
    state_dir = args.state_dir.resolve()
    if args.command == "up":
        up(state_dir, args.cluster_dir.resolve(), args.executor or executor_from_env())
    elif args.command == "down":
        down(state_dir)
    else:
        status(state_dir)


if __name__ == "__main__":
    main()

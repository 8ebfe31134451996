"""The test stack's executors: LocalExecutor (tasks run in the schedulers, every component
writes one log folder) or CeleryExecutor, the Helm chart's default (a Redis broker,
PostgreSQL as the result backend, Celery workers that run the tasks, each worker and triggerer
as on a machine of its own: its own host name, log folder and log server, so that the API
server reads every task log through Airflow's log servers).

``EXECUTOR=local`` or ``EXECUTOR=celery`` (the default) picks it for ``make airflow-up`` and
the reliability tests' stack (``executor_from_env``).
"""

from __future__ import annotations

import os
from pathlib import Path

EXECUTORS = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
#: The reliability stack's and ``make airflow-up``'s executor when EXECUTOR is not set: the
#: Helm chart's default, so the provider is tried as most deployments run it.
DEFAULT_EXECUTOR = "celery"
#: Task slots per Celery worker: two workers of two share the machine's two cores, as the
#: LocalExecutor stack's two schedulers run two task processes each.
WORKER_CONCURRENCY = 2
LOG_ROUTES = Path(__file__).with_name("log_routes.py")


def executor_from_env(default: str = DEFAULT_EXECUTOR) -> str:
    """``local`` or ``celery``, from the ``EXECUTOR`` variable."""
    executor = os.environ.get("EXECUTOR") or default
    if executor not in EXECUTORS:
        raise ValueError(f"EXECUTOR={executor!r}: expected one of {', '.join(EXECUTORS)}")
    return executor


def celery_env(broker_url: str, metadata_db_url: str) -> dict[str, str]:
    """Every component's Celery settings: the broker, and the metadata DB's PostgreSQL as
    Celery's result backend (the chart's default, ``db+postgresql://``)."""
    return {
        "AIRFLOW__CELERY__BROKER_URL": broker_url,
        "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{metadata_db_url}",
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(WORKER_CONCURRENCY),
    }


def argv_of(component: str, command: str, log_routes: list[str]) -> list[str]:
    """A component's command line after the interpreter."""
    if command == "worker":
        # A Celery node name of its own: two workers named alike are refused by the CLI.
        return ["-m", "airflow", "celery", "worker", "--celery-hostname", f"{component}@%h"]
    if command == "log-routes":
        return ["-I", str(LOG_ROUTES), *log_routes]
    return ["-m", "airflow", command]


def serves_logs(command: str) -> str | None:
    """Which log server a component runs under CeleryExecutor (WORKER, TRIGGER or none):
    the schedulers run no tasks there, so they serve none."""
    return {"worker": "WORKER", "triggerer": "TRIGGER"}.get(command)

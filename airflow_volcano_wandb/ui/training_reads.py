"""What the Training tab reads of the cluster and of W&B for one refresh: one GET of the job and
one LIST of its pods (none once the job is gone), the W&B run's summary and history, else the
master pod's log for its ``AVW_PROGRESS`` records, and for the Training page one LIST of the
managed jobs per namespace. Only calls, over the deployment's connections, through hooks held
per connection by this API server process (not made again per refresh); a read that fails
reads as nothing, so the page shows what the provider kept.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR
from airflow_volcano_wandb.template import master_task_name
from airflow_volcano_wandb.wait.diagnostics import started_master_pod

log = logging.getLogger(__name__)
#: A held hook is made again after this long (fresh credentials, a changed connection).
HELD_SECONDS = 300.0
#: W&B reads give up after this many seconds (the page shows what the provider kept).
WANDB_SECONDS = 10
#: The last lines of the master's log read for its ``AVW_PROGRESS`` records.
LOG_LINES = 5000
_held: dict[str, tuple[float, Any]] = {}
_lock = threading.Lock()


def volcano_hook(conn_id: str) -> Any:
    """This process's ``VolcanoHook`` of ``conn_id`` (its API client kept between refreshes)."""
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

    now = time.monotonic()
    with _lock:
        made_at, hook = _held.get(conn_id, (now, None))
        if hook is None or now - made_at >= HELD_SECONDS:
            hook = VolcanoHook(kubernetes_conn_id=conn_id)
            _held[conn_id] = (now, hook)
    return hook


def _failed(conn_id: str, what: str, exc: Exception) -> None:
    """A failed read: said in the API server's log; the hook is made again next time."""
    with _lock:
        _held.pop(conn_id, None)
    log.warning("Training tab: cannot read %s: %s", what, exc)


def job_and_pods(conn_id: str, name: str, namespace: str) -> tuple[dict | None, list[dict]]:
    """The job (``None``: gone) and its pods: one GET, and one LIST while the job is there."""
    try:
        hook = volcano_hook(conn_id)
        job = hook.get_job(name, namespace)
        return job, (hook.list_job_pods(name, namespace) if job is not None else [])
    except Exception as exc:  # shown as what the provider kept
        _failed(conn_id, f"job {namespace}/{name}", exc)
        return None, []


def master_log(conn_id: str, job: Mapping[str, Any] | None, pods: Sequence[Mapping]) -> str:
    """The master (rank 0) pod's log with its timestamps, its last :data:`LOG_LINES` lines: one
    GET of ``pods/log``; ``""`` when it has not started or cannot be read."""
    pod = started_master_pod(pods, master_task_name(job) if job else None)
    if pod is None:
        return ""
    name, namespace = pod["metadata"]["name"], pod["metadata"].get("namespace", "default")
    try:
        container = pod["spec"]["containers"][0]["name"]
        hook = volcano_hook(conn_id)
        return str(
            hook.read_pod_log(name, namespace, LOG_LINES, container=container, timestamps=True)
        )
    except Exception as exc:
        _failed(conn_id, f"the log of {namespace}/{name}", exc)
        return ""


def managed_jobs(conn_id: str, namespace: str) -> dict[str, dict]:
    """The namespace's jobs of this provider by name: one LIST."""
    try:
        jobs = volcano_hook(conn_id).list_jobs(namespace, MANAGED_SELECTOR)
    except Exception as exc:
        _failed(conn_id, f"the jobs of {namespace}", exc)
        return {}
    return {str((job.get("metadata") or {}).get("name")): job for job in jobs}


def _wandb(conn_id: str | None) -> Any:
    from airflow_volcano_wandb.hooks.wandb import WandbHook

    return WandbHook.shared(conn_id or "", timeout=WANDB_SECONDS, deadline=WANDB_SECONDS)


def run_summary(
    conn_id: str | None, run_id: str, entity: str | None, project: str | None
) -> dict[str, Any] | None:
    """The W&B run's summary now; ``None`` when it cannot be read."""
    try:
        return _wandb(conn_id).get_run_summary(run_id, entity=entity, project=project)
    except Exception as exc:
        log.info("Training tab: no summary of W&B run %s: %s", run_id, exc)
        return None


def run_history(
    conn_id: str | None, run_id: str, entity: str | None, project: str | None, samples: int
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The W&B run's summary and its logged rows (at most ``samples``, W&B's sampling): two
    GraphQL reads; ``(None, [])`` when the run cannot be read."""
    summary = run_summary(conn_id, run_id, entity, project)
    if summary is None:
        return None, []
    try:
        return summary, _wandb(conn_id).get_run_history(
            run_id, entity=entity, project=project, samples=samples
        )
    except Exception as exc:
        log.info("Training tab: no history of W&B run %s: %s", run_id, exc)
        return summary, []


def run_url(conn_id: str | None, run_id: str, entity: str | None, project: str | None) -> str:
    """The W&B run's address from its connection (no request); ``""`` when it cannot be told."""
    try:
        return str(_wandb(conn_id).run_url(run_id, entity=entity, project=project))
    except Exception:
        return ""

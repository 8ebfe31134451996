"""What the Training tab reads of the cluster and of W&B for one refresh: one GET of the job and
one LIST of its pods (none once the job is gone), the run's summary, and for the Training page
one LIST of the managed jobs per namespace. Only calls, over the deployment's connections; a
read that fails reads as nothing, so the page shows what the provider kept.
"""

from __future__ import annotations

import logging
from typing import Any

from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR

log = logging.getLogger(__name__)


def job_and_pods(conn_id: str, name: str, namespace: str) -> tuple[dict | None, list[dict]]:
    """The job (``None``: gone) and its pods: one GET, and one LIST while the job is there."""
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

    hook = VolcanoHook(kubernetes_conn_id=conn_id)
    try:
        job = hook.get_job(name, namespace)
        return job, (hook.list_job_pods(name, namespace) if job is not None else [])
    except Exception as exc:  # shown as what the provider kept
        log.warning("Training tab: cannot read job %s/%s: %s", namespace, name, exc)
        return None, []


def managed_jobs(conn_id: str, namespace: str) -> dict[str, dict]:
    """The namespace's jobs of this provider by name: one LIST."""
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

    try:
        jobs = VolcanoHook(kubernetes_conn_id=conn_id).list_jobs(namespace, MANAGED_SELECTOR)
    except Exception as exc:
        log.warning("Training page: cannot list the jobs of %s: %s", namespace, exc)
        return {}
    return {str((job.get("metadata") or {}).get("name")): job for job in jobs}


def run_summary(
    conn_id: str | None, run_id: str, entity: str | None, project: str | None
) -> dict[str, Any] | None:
    """The W&B run's summary now, within 10 s; ``None`` when it cannot be read."""
    from airflow_volcano_wandb.hooks.wandb import WandbHook

    try:
        hook = WandbHook(conn_id, timeout=10)
        return hook.get_run_summary(run_id, entity=entity, project=project)
    except Exception as exc:
        log.info("Training tab: no summary of W&B run %s: %s", run_id, exc)
        return None

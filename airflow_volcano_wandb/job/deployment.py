"""Which Airflow deployment this is (``[volcano_wandb] deployment``): it keeps apart the jobs
of two Airflows that run the same DAG and run ids against one namespace.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from airflow.configuration import conf

from airflow_volcano_wandb.job.ownership import DEPLOYMENT_LABEL

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

log = logging.getLogger(__name__)


def configured_deployment() -> str:
    """This deployment's name, or ``""`` when none is configured."""
    return (conf.get("volcano_wandb", "deployment", fallback="") or "").strip()


def warn_of_other_deployments(hook: VolcanoHook, namespace: str, task_log: Any = log) -> None:
    """Warn when this deployment has no name but the namespace holds named deployments'
    jobs (best-effort: one LIST of at most one job)."""
    try:
        others = hook.list_jobs(namespace, DEPLOYMENT_LABEL, limit=1)
    except Exception:
        return
    if others:
        labels = others[0]["metadata"].get("labels") or {}
        task_log.warning(
            "Namespace %s holds jobs of Airflow deployment %r, and this Airflow sets no "
            "[volcano_wandb] deployment: set one, so that the deployments' jobs and W&B runs "
            "can never be mistaken for each other",
            namespace,
            labels.get(DEPLOYMENT_LABEL),
        )

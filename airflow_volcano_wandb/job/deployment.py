"""Which Airflow deployment this is: the ``[volcano_wandb] deployment`` option.

Two Airflows (staging and prod, or one before and after a metadata-DB reset) can run the same
DAG with the same run ids against one namespace. The deployment name keeps their jobs apart:
it is part of the identity labels and hash, the job name (through the W&B run id) and the
run id itself.
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
    """Warn when this deployment has no name but the namespace holds named deployments' jobs.

    Best-effort (one LIST of at most one job): a Role without ``list`` only loses the warning.
    """
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

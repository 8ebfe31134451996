"""The job a task submits, shown before it runs: ``dry_run()``, the task log, the Rendered
Template view.

A dry run renders the options against the DAG's params' defaults, as a manual trigger would,
and names the run ``dry_run``. A try keeps the Job it submits in :data:`RENDERED_JOB`, which
Airflow stores again after the try (``overwrite_rtif_after_execution``), as YAML; the W&B key is
not in it: the job names its Secret.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.job.deployment import configured_deployment
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.operators.operator_parts import OperatorParts, TryRendering
from airflow_volcano_wandb.template import job_as_yaml

DRY_RUN_ID = "dry_run"
#: The operator's field that holds the Job a try submits, as YAML.
RENDERED_JOB = "rendered_job"


def shown(job: dict[str, Any], log: Any) -> str:
    """``job`` as YAML, logged as the Job about to be submitted."""
    text = job_as_yaml(job)
    log.info("The Volcano Job to submit:\n%s", text)
    return text


def rendered_job(op: Any) -> dict[str, Any]:
    """The Volcano Job ``op`` would submit in a first try of a run named ``dry_run``."""
    ti = SimpleNamespace(
        dag_id=op.dag_id,
        task_id=op.task_id,
        run_id=DRY_RUN_ID,
        map_index=-1,
        try_number=1,
        log_url=None,
    )
    params = op.params.dump() if op.params else {}
    context = {"ti": ti, "task": op, "params": params, "run_id": DRY_RUN_ID, "dag_run": None}
    task = copy.copy(op)  # rendering writes the values in place; the DAG's task stays as it is
    try:
        task.render_template_fields(context)
    except Exception as exc:
        raise AirflowException(
            f"dry_run: a templated option needs what only a DAG run gives ({exc})"
        ) from exc
    parts = OperatorParts.of(task)
    identity = TaskInstanceIdentity(
        op.dag_id, op.task_id, DRY_RUN_ID, deployment=configured_deployment()
    )
    hook = parts.report.hook()
    return TryRendering(parts, context, identity, hook, lambda: None)(1)[1]

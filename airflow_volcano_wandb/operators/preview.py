"""The job a task submits, shown before it runs: ``dry_run()``, the task log, the Rendered
Template view.

Airflow renders a task's templated options from a run's context; a dry run has none, so it
renders them against what a manual trigger would start from (the DAG's params' defaults) and
names the run ``dry_run``. A value only a run can give (an XCom) fails here, naming it.

A try shows the Job it is about to submit at the top of its log, and keeps it in the
operator's :data:`RENDERED_JOB` field: a template field whose value is set by ``execute``, not
by Jinja, which Airflow stores again after the try (``overwrite_rtif_after_execution``) so
the task instance's Rendered Template view shows it, as YAML. The W&B key is in neither: the
job names its Secret.
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
    return TryRendering(parts, context, identity, parts.report.hook(), lambda: None)(1)[1]

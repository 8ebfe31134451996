"""The "Training" button of a training task on Airflow 3.0, whose task instance page has no
plugin tab (``external_views`` came in 3.1): it opens the tab's page, which the provider's
plugin app serves (``ui/``, docs/training-tab.md). The plugin adds it as a global link on 3.0
only: 3.0 computes a plugin's links in the API server, per task, from the task's key."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from airflow.sdk import BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey


class TrainingLink(BaseOperatorLink):
    """The Training page of a task of the provider's operator or sensor; ``""`` (no button) for
    any other task."""

    name = "Training"

    def get_link(self, operator: Any, *, ti_key: TaskInstanceKey) -> str:
        from airflow_volcano_wandb.ui.training_app import OPERATORS, PREFIX

        if getattr(operator, "task_type", None) not in OPERATORS:
            return ""
        parts = (ti_key.dag_id, ti_key.run_id, ti_key.task_id)
        where = "/".join(quote(part, safe="") for part in parts)
        return f"{PREFIX}/ti/{where}/{ti_key.map_index}"

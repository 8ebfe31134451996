"""Which Airflow task instance a Volcano job belongs to.

Every job this provider submits carries labels naming its task instance, so that a retry, a
restarted worker or a second scheduler finds the job that is already there instead of
submitting another. Label values are length-limited and sanitized, so the match is made on
a hash of the exact identity, and the readable labels are for people and ``kubectl``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.naming import label_value

DOMAIN = "airflow-volcano-wandb.io"
MANAGED_BY = "airflow-volcano-wandb"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
IDENTITY_LABEL = f"{DOMAIN}/task-instance"
DAG_ID_LABEL = f"{DOMAIN}/dag-id"
TASK_ID_LABEL = f"{DOMAIN}/task-id"
RUN_ID_LABEL = f"{DOMAIN}/run-id"
MAP_INDEX_LABEL = f"{DOMAIN}/map-index"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
TRY_NUMBER_ANNOTATION = f"{DOMAIN}/try-number"
IDENTITY_ANNOTATION = f"{DOMAIN}/task-instance"


@dataclass(frozen=True)
class TaskInstanceIdentity:
    """A task instance, without the try: all tries of it own the same job."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1

    @property
    def key(self) -> str:
        return f"{self.dag_id}/{self.task_id}/{self.run_id}/{self.map_index}"

    @property
    def digest(self) -> str:
        """A label-safe, collision-resistant id of the exact identity."""
        return hashlib.sha256(self.key.encode()).hexdigest()[:40]

    def labels(self) -> dict[str, str]:
        return {
            MANAGED_BY_LABEL: MANAGED_BY,
            IDENTITY_LABEL: self.digest,
            DAG_ID_LABEL: label_value(self.dag_id),
            TASK_ID_LABEL: label_value(self.task_id),
            RUN_ID_LABEL: label_value(self.run_id),
            # -1 (not mapped) is no valid label value: it may not start with "-".
            MAP_INDEX_LABEL: str(self.map_index) if self.map_index >= 0 else "none",
        }

    def annotations(self, try_number: int | None = None) -> dict[str, str]:
        annotations = {IDENTITY_ANNOTATION: self.key}
        if try_number is not None:
            annotations[TRY_NUMBER_ANNOTATION] = str(try_number)
        return annotations

    def selector(self) -> str:
        """A label selector that finds this task instance's jobs (and Secrets)."""
        return f"{MANAGED_SELECTOR},{IDENTITY_LABEL}={self.digest}"

    def owns(self, obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return labels.get(IDENTITY_LABEL) == self.digest


def owner_of(obj: Mapping[str, Any]) -> str:
    """The task instance named on an object, for error messages about name clashes."""
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    return str(annotations.get(IDENTITY_ANNOTATION) or "something other than this provider")

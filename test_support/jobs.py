"""Helpers to run jobs on the local cluster: simulated pod run times and DAG files.

The local cluster's KWOK pods run no containers; two pod annotations say how long a pod
"runs" and with which exit code it ends (``DURATION_ANNOTATION``, ``EXIT_CODE_ANNOTATION``).
"""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from airflow_volcano_wandb.testing.cluster.podlogs import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION

__all__ = ["DURATION_ANNOTATION", "EXIT_CODE_ANNOTATION", "load_dag", "with_pod_annotations"]


def with_pod_annotations(
    template: Mapping[str, Any], **task_annotations: Mapping[str, str]
) -> dict[str, Any]:
    """A copy of a Volcano Job template with annotations added to the named tasks' pods,
    e.g. ``with_pod_annotations(t, master={DURATION_ANNOTATION: "30"})``."""
    job = copy.deepcopy(dict(template))
    for task in job["spec"]["tasks"]:
        annotations = task_annotations.get(task["name"])
        if annotations:
            metadata = task["template"].setdefault("metadata", {})
            metadata.setdefault("annotations", {}).update(annotations)
    return job


def load_dag(path: Path, dag_id: str) -> Any:
    """Import ``dag_id`` from the DAG file at ``path`` (for ``dag.test()``)."""
    spec = importlib.util.spec_from_file_location(f"_avw_dags_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import DAG file {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for value in vars(module).values():
        if getattr(value, "dag_id", None) == dag_id:
            return value
    raise LookupError(f"no DAG {dag_id!r} in {path}")

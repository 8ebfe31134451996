"""Finding tasks, pod templates and containers in a Volcano Job, and the minimal shape the
override stage relies on (the full checks are in ``validate``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from airflow_volcano_wandb.template.errors import Path, error_at
from airflow_volcano_wandb.template.values import type_name

CONTAINER_LISTS = ("initContainers", "containers")
#: Every container list of a pod spec. Ephemeral containers cannot be created with a pod, but
#: a template may still hold them, so security checks look at them too.
ALL_CONTAINER_LISTS = (*CONTAINER_LISTS, "ephemeralContainers")


def check_shape(job: dict[str, Any]) -> list[dict[str, Any]]:
    """Return ``spec.tasks`` once it is a non-empty list of mappings with string names."""
    spec = job.get("spec")
    if not isinstance(spec, dict):
        raise error_at(("spec",), f"must be a mapping, found {type_name(spec)}")
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise error_at(("spec", "tasks"), "must be a non-empty list of tasks")
    for i, task in enumerate(tasks):
        if not isinstance(task, dict):
            raise error_at(("spec", "tasks", i), f"must be a mapping, found {type_name(task)}")
        if not isinstance(task.get("name"), str):
            raise error_at(
                ("spec", "tasks", i, "name"),
                "every task needs a name (overrides and the pytorch plugin refer to tasks by name)",
            )
    metadata = job.get("metadata")
    if metadata is None:
        job["metadata"] = {}
    elif not isinstance(metadata, dict):
        raise error_at(("metadata",), f"must be a mapping, found {type_name(metadata)}")
    return tasks


def task_index(tasks: list[dict[str, Any]]) -> dict[str, int]:
    """Task name -> position; the first wins (duplicates are reported by validation)."""
    index: dict[str, int] = {}
    for i, task in enumerate(tasks):
        index.setdefault(task["name"], i)
    return index


def pod_spec(task: dict[str, Any]) -> dict[str, Any] | None:
    template = task.get("template")
    spec = template.get("spec") if isinstance(template, dict) else None
    return spec if isinstance(spec, dict) else None


def iter_containers(task: dict[str, Any], task_path: Path) -> Iterator[tuple[Path, dict[str, Any]]]:
    return all_containers(pod_spec(task), (*task_path, "template", "spec"), CONTAINER_LISTS)


def all_containers(
    spec: Any, spec_path: Path, keys: Sequence[str] = ALL_CONTAINER_LISTS
) -> Iterator[tuple[Path, dict[str, Any]]]:
    """Every container of a pod spec (init and ephemeral too, unless ``keys`` says which
    lists), with its path."""
    if not isinstance(spec, dict):
        return
    for key in keys:
        items = spec.get(key)
        if isinstance(items, list):
            for i, container in enumerate(items):
                if isinstance(container, dict):
                    yield (*spec_path, key, i), container


def main_container(task: dict[str, Any], task_path: Path) -> tuple[Path, dict[str, Any]]:
    """The container that per-task overrides target: the one named like the task, else the
    first. Sidecars keep their own image, command and resources (e.g. no GPU for a logger)."""
    spec_path = (*task_path, "template", "spec")
    found = list(all_containers(pod_spec(task), spec_path, ("containers",)))
    if not found:
        raise error_at((*spec_path, "containers"), "the task has no containers")
    for path, container in found:
        if container.get("name") == task["name"]:
            return path, container
    return found[0]


def mounts_at(container: dict[str, Any], path: str) -> bool:
    """Whether the container mounts something at ``path`` already."""
    mounts = container.get("volumeMounts")
    return isinstance(mounts, list) and any(
        isinstance(m, dict) and str(m.get("mountPath") or "").rstrip("/") == path for m in mounts
    )


def pod_metadata(task: dict[str, Any], task_path: Path) -> dict[str, Any]:
    """The pod template's metadata, created when absent."""
    template = task.get("template")
    if not isinstance(template, dict):
        raise error_at((*task_path, "template"), "must be a mapping (the pod template)")
    metadata = template.setdefault("metadata", {})
    if not isinstance(metadata, dict):
        raise error_at((*task_path, "template", "metadata"), "must be a mapping")
    return metadata

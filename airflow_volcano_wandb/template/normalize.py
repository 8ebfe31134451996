"""Typed macro values meet Kubernetes field types.

``${name}`` alone keeps the value's type, which is what ``replicas: ${workers}`` needs. But
many Kubernetes fields accept only strings (an env value, an annotation, an argument), so in
those well-known places a number or boolean is formatted as text, exactly as it would be
inside a longer string. Counts given as digit strings (Airflow forms send strings) become ints.
Label values that macros made invalid are rewritten with :func:`naming.label_value`.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.template import naming
from airflow_volcano_wandb.template.errors import Path
from airflow_volcano_wandb.template.structure import iter_containers
from airflow_volcano_wandb.template.values import as_int, as_text

_SPEC_STRINGS = ("queue", "schedulerName", "priorityClassName")
_SPEC_COUNTS = ("minAvailable", "maxRetry", "ttlSecondsAfterFinished")
_TASK_COUNTS = ("replicas", "minAvailable", "maxRetry")
_CONTAINER_STRINGS = ("name", "image", "workingDir")
_CONTAINER_LISTS = ("command", "args")


def _text_field(parent: dict[str, Any], key: str, path: Path) -> None:
    if key in parent and not isinstance(parent[key], str):
        parent[key] = as_text(parent[key], (*path, key), key)


def _count_field(parent: dict[str, Any], key: str, path: Path) -> None:
    if key in parent and type(parent[key]) is not int:
        parent[key] = as_int(parent[key], (*path, key), key)


def _metadata(parent: dict[str, Any], path: Path) -> None:
    metadata = parent.get("metadata")
    if not isinstance(metadata, dict):
        return
    path = (*path, "metadata")
    _text_field(metadata, "name", path)
    _text_field(metadata, "namespace", path)
    labels = metadata.get("labels")
    if isinstance(labels, dict):
        for key, value in labels.items():
            text = as_text(value, (*path, "labels", key), "label value")
            # Macros such as ${project_name} may hold spaces or be long; a label value must
            # not be, so it is rewritten deterministically instead of failing the run.
            labels[key] = text if naming.is_label_value(text) else naming.label_value(text)
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict):
        for key, value in annotations.items():
            annotations[key] = as_text(value, (*path, "annotations", key), "annotation value")


def _container(container: dict[str, Any], path: Path) -> None:
    for key in _CONTAINER_STRINGS:
        _text_field(container, key, path)
    for key in _CONTAINER_LISTS:
        items = container.get(key)
        if isinstance(items, list):
            container[key] = [as_text(v, (*path, key, i), key) for i, v in enumerate(items)]
    env = container.get("env")
    if isinstance(env, list):
        for i, entry in enumerate(env):
            if isinstance(entry, dict) and "value" in entry:
                entry["value"] = as_text(entry["value"], (*path, "env", i, "value"), "env value")


def normalize(job: dict[str, Any], tasks: list[dict[str, Any]]) -> None:
    """Coerce well-known string and count fields in place (see the module docstring)."""
    _metadata(job, ())
    spec = job["spec"]
    for key in _SPEC_STRINGS:
        _text_field(spec, key, ("spec",))
    for key in _SPEC_COUNTS:
        _count_field(spec, key, ("spec",))
    plugins = spec.get("plugins")
    if isinstance(plugins, dict):
        for name, arguments in plugins.items():
            if isinstance(arguments, list):
                plugins[name] = [
                    as_text(v, ("spec", "plugins", name, i), "plugin argument")
                    for i, v in enumerate(arguments)
                ]
    for i, task in enumerate(tasks):
        task_path: Path = ("spec", "tasks", i)
        for key in _TASK_COUNTS:
            _count_field(task, key, task_path)
        template = task.get("template")
        if isinstance(template, dict):
            _metadata(template, (*task_path, "template"))
        for container_path, container in iter_containers(task, task_path):
            _container(container, container_path)

"""Allow-lists for values that people choose: images, the namespace, service accounts.

A queue template is edited in W&B, and a run's values may come from Airflow's trigger form;
neither should decide which code runs with which identity, or where. The DAG author (or the
deployment) names what is allowed, and every rendered value, whatever set it (template,
macro or override), must be on the list.
"""

from __future__ import annotations

from collections.abc import Collection
from fnmatch import fnmatchcase
from typing import Any

from airflow_volcano_wandb._template.errors import Path, error_at
from airflow_volcano_wandb._template.structure import all_containers, pod_spec
from airflow_volcano_wandb._template.values import show, type_name

Problems = list[tuple[Path, str]]

#: The two places a pod names its service account; ``serviceAccount`` is the deprecated
#: alias, which Kubernetes still honours when ``serviceAccountName`` is empty.
SERVICE_ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount")


def as_allow_list(value: Any, argument: str) -> tuple[str, ...] | None:
    """Check a ``render_job`` allow-list argument: ``None`` (no list) or strings.

    A bare string is refused: iterated, ``"registry/*"`` would allow every one-character
    value it contains. An empty list is allowed and allows nothing.
    """
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, Collection):
        raise error_at(
            (argument,), f"must be a list of strings or None, not {type_name(value)} {show(value)}"
        )
    items = tuple(value)
    for i, item in enumerate(items):
        if not isinstance(item, str) or not item:
            raise error_at((argument, i), f"must be a non-empty string, not {show(item)}")
    return items


def image_allowed(image: str, patterns: tuple[str, ...]) -> bool:
    """Whether ``image`` matches one of the fnmatch ``patterns``, case-sensitively.

    Images are compared as written (no registry or tag is filled in), so a template cannot
    slip past a pattern by spelling an image differently; it can only be refused.
    """
    return any(fnmatchcase(image, pattern) for pattern in patterns)


def image_problems(tasks: list[dict[str, Any]], patterns: tuple[str, ...]) -> Problems:
    """Every container image (init and ephemeral containers too) outside ``patterns``."""
    problems: Problems = []
    for i, task in enumerate(tasks):
        spec_path: Path = ("spec", "tasks", i, "template", "spec")
        for path, container in all_containers(pod_spec(task), spec_path):
            image = container.get("image")
            if not isinstance(image, str) or not image_allowed(image, patterns):
                problems.append(
                    (
                        (*path, "image"),
                        f"image {show(image)} matches none of allowed_images "
                        f"({', '.join(patterns) or 'empty'})",
                    )
                )
    return problems


def namespace_problems(namespace: Any, allowed: tuple[str, ...], source: str) -> Problems:
    """The job's final namespace must be one of ``allowed`` (exact names)."""
    if namespace in allowed:
        return []
    if namespace is None:
        message = "the job has no namespace, but allowed_namespaces is set; pass namespace="
    else:
        message = f"namespace {show(namespace)} (from {source}) is not in allowed_namespaces"
    return [(("metadata", "namespace"), f"{message} ({', '.join(allowed) or 'empty'})")]


def service_account_problems(tasks: list[dict[str, Any]], allowed: frozenset[str]) -> Problems:
    """Every pod template naming a service account outside ``allowed``. An empty name is
    the same as none (the namespace's ``default`` account), so it is not a choice to check."""
    shown = ", ".join(sorted(allowed)) if allowed else "none (pass service_account=)"
    problems: Problems = []
    for i, task in enumerate(tasks):
        spec = pod_spec(task) or {}
        for field in SERVICE_ACCOUNT_FIELDS:
            name = spec.get(field)
            if name in (None, "") or (isinstance(name, str) and name in allowed):
                continue
            problems.append(
                (
                    ("spec", "tasks", i, "template", "spec", field),
                    f"service account {show(name)} is not allowed; allowed: {shown}",
                )
            )
    return problems

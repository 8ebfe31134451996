"""Allow-lists for values that people choose: images, the namespace, service accounts, the
scheduler, the Volcano queue and priority classes.

A queue template is edited in W&B, and a run's values may come from Airflow's trigger form;
neither should decide which code runs with which identity, or where. The DAG author (or the
deployment) names what is allowed, and every rendered value, whatever set it (template,
macro or override), must be on the list.
"""

from __future__ import annotations

from collections.abc import Collection
from fnmatch import fnmatchcase
from typing import Any

from airflow_volcano_wandb.template.errors import Path, Problems, error_at
from airflow_volcano_wandb.template.structure import all_containers, pod_spec
from airflow_volcano_wandb.template.values import show, type_name

#: The two places a pod names its service account; ``serviceAccount`` is the deprecated
#: alias, which Kubernetes still honours when ``serviceAccountName`` is empty.
SERVICE_ACCOUNT_FIELDS = ("serviceAccountName", "serviceAccount")
#: The queue Volcano's admission webhook gives a job that names none.
VOLCANO_DEFAULT_QUEUE = "default"


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


def image_allowed(image: str, patterns: Collection[str]) -> bool:
    """Whether ``image`` matches one of the fnmatch ``patterns``, case-sensitively.

    Images are compared as written (no registry or tag is filled in), so a template cannot
    slip past a pattern by spelling an image differently; it can only be refused.
    """
    return any(fnmatchcase(image, pattern) for pattern in patterns)


def image_problems(tasks: list[dict[str, Any]], patterns: Collection[str]) -> Problems:
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
                        f"image {show(image)} matches none of allowed_images ({_listed(patterns)})",
                    )
                )
    return problems


def namespace_problems(namespace: Any, allowed: Collection[str], source: str) -> Problems:
    """The job's final namespace must be one of ``allowed`` (exact names)."""
    if namespace in allowed:
        return []
    if namespace is None:
        message = "the job has no namespace, but allowed_namespaces is set; pass namespace="
    else:
        message = f"namespace {show(namespace)} (from {source}) is not in allowed_namespaces"
    return [(("metadata", "namespace"), f"{message} ({_listed(allowed)})")]


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


def _listed(allowed: Collection[str]) -> str:
    return ", ".join(allowed) or "empty"


def _job_and_pod_values(
    job: dict[str, Any], tasks: list[dict[str, Any]], field: str
) -> list[tuple[Path, Any]]:
    """``field`` of the job's spec and of every pod template that sets it. An unset or empty
    pod field is no choice: Volcano's controller fills it from the job's."""
    found: list[tuple[Path, Any]] = []
    if field in job["spec"]:
        found.append((("spec", field), job["spec"][field]))
    for i, task in enumerate(tasks):
        value = (pod_spec(task) or {}).get(field)
        if value not in (None, ""):
            found.append((("spec", "tasks", i, "template", "spec", field), value))
    return found


def scheduler_problems(
    job: dict[str, Any], tasks: list[dict[str, Any]], allowed: Collection[str]
) -> Problems:
    """The job's and every pod's ``schedulerName`` must be allowed: a pod handed to another
    scheduler (``default-scheduler``) escapes Volcano's gang and its queue's quota."""
    return [
        (
            path,
            f"scheduler {show(name)} is not in allowed_schedulers ({_listed(allowed)}); pods "
            "given to another scheduler escape Volcano's gang and the queue's quota",
        )
        for path, name in _job_and_pod_values(job, tasks, "schedulerName")
        if not (isinstance(name, str) and name in allowed)
    ]


def queue_problems(job: dict[str, Any], allowed: Collection[str]) -> Problems:
    """The Volcano queue the job lands in (``default`` when it names none) must be allowed."""
    queue = job["spec"].get("queue")
    if queue in (None, ""):
        if VOLCANO_DEFAULT_QUEUE in allowed:
            return []
        message = (
            f"the job names no queue, so Volcano puts it in {VOLCANO_DEFAULT_QUEUE!r}, which "
            "is not in allowed_queues; pass queue="
        )
    elif isinstance(queue, str) and queue in allowed:
        return []
    else:
        message = f"queue {show(queue)} is not in allowed_queues"
    return [(("spec", "queue"), f"{message} ({_listed(allowed)})")]


def priority_class_problems(
    job: dict[str, Any], tasks: list[dict[str, Any]], allowed: Collection[str]
) -> Problems:
    """The job's (its PodGroup's, and its pods' unless they set one) and every pod
    template's ``priorityClassName`` must be allowed."""
    return [
        (
            path,
            f"priority class {show(name)} is not in allowed_priority_classes "
            f"({_listed(allowed)}): a higher class preempts other teams' pods",
        )
        for path, name in _job_and_pod_values(job, tasks, "priorityClassName")
        if name not in (None, "") and not (isinstance(name, str) and name in allowed)
    ]

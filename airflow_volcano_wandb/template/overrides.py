"""Per-run overrides, applied after macros. Each has one merge rule, documented in
``docs/templates.md`` and on its declaration in :class:`TaskOverrides` (``render_job``'s
keywords of the same names)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template import naming
from airflow_volcano_wandb.template.errors import Path, error_at
from airflow_volcano_wandb.template.options import option
from airflow_volcano_wandb.template.quantity import check_quantity
from airflow_volcano_wandb.template.structure import (
    iter_containers,
    main_container,
    pod_metadata,
    pod_spec,
    task_index,
)
from airflow_volcano_wandb.template.values import (
    as_int,
    as_text,
    clone,
    copy_json,
    has_wide_int,
    show,
    type_name,
)

_ENV_KEYS = frozenset({"name", "value", "valueFrom"})
_RESOURCE_KEYS = ("limits", "requests")


def _mapping(value: Any, path: Path, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise error_at(path, f"{what} must be a mapping, not {type_name(value)}")
    return value


def _per_task(
    tasks: list[dict[str, Any]], overrides: Any, key: str
) -> Iterator[tuple[Any, Any, Path, int]]:
    """Each ``task name -> value`` of the override ``key``, with its path and the task's index."""
    index = task_index(tasks)
    for name, value in _mapping(overrides, (key,), key).items():
        if name not in index:
            raise error_at(
                (key, name),
                f"no task named {show(name)}; the template's tasks are {', '.join(index)}",
            )
        yield name, value, (key, name), index[name]


def apply_replicas(
    tasks: list[dict[str, Any]], replicas: Mapping[str, Any], max_replicas: int
) -> None:
    """Set ``replicas`` of the named tasks (ints or digit strings, 0..max_replicas)."""
    for name, value, path, i in _per_task(tasks, replicas, "replicas"):
        what = f"replicas of task {name!r}"
        tasks[i]["replicas"] = as_int(value, path, what, maximum=max_replicas)


def _image(value: Any, path: Path) -> str:
    if not isinstance(value, str) or not value.strip() or value != value.strip():
        raise error_at(
            path, f"an image must be a non-empty string without spaces, got {show(value)}"
        )
    return value


def apply_image(tasks: list[dict[str, Any]], image: str | Mapping[str, Any]) -> None:
    """A string sets the image of every container of every task (init containers, typically
    helper images, are left alone); a mapping sets the main container of the named tasks."""
    if isinstance(image, str):
        image = _image(image, ("image",))
        for i, task in enumerate(tasks):
            for path, container in iter_containers(task, ("spec", "tasks", i)):
                if path[-2] == "containers":
                    container["image"] = image
        return
    for _, value, path, i in _per_task(tasks, image, "image"):
        main_container(tasks[i], ("spec", "tasks", i))[1]["image"] = _image(value, path)


def _env_entries(env: Mapping[str, Any] | Sequence[Any]) -> list[dict[str, Any]]:
    if isinstance(env, Mapping):
        items: list[Any] = [{"name": k, "value": v} for k, v in env.items()]
    elif isinstance(env, Sequence) and not isinstance(env, str | bytes):
        items = list(env)
    else:
        raise error_at(("env",), f"env must be a mapping or a list, not {type_name(env)}")
    entries: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(items):
        path: Path = ("env", i)
        if not isinstance(item, Mapping):
            raise error_at(path, f"an env entry must be a mapping, not {type_name(item)}")
        name = item.get("name")
        if isinstance(name, str):
            path = ("env", name)
        if not isinstance(name, str) or not name or "=" in name:
            raise error_at(
                path, f"env name must be a non-empty string without '=', got {show(name)}"
            )
        if name in seen:
            raise error_at(path, "the env override names this variable twice")
        seen.add(name)
        extra = set(item) - _ENV_KEYS
        if extra:
            raise error_at(path, f"unexpected key(s) {sorted(map(str, extra))}")
        if ("value" in item) == ("valueFrom" in item):
            raise error_at(path, "give exactly one of 'value' and 'valueFrom'")
        if "value" in item:
            entries.append({"name": name, "value": as_text(item["value"], path, "env value")})
        else:
            value_from = copy_json(_mapping(item["valueFrom"], path, "valueFrom"), path)
            if has_wide_int(value_from):
                raise error_at(path, "valueFrom holds an integer outside int64")
            entries.append({"name": name, "valueFrom": value_from})
    return entries


def apply_env(tasks: list[dict[str, Any]], env: Mapping[str, Any] | Sequence[Any]) -> None:
    """Merge env into every container (not init containers) of every task, by name: an
    override replaces the template's entry in place, new names are appended in order."""
    entries = _env_entries(env)
    for i, task in enumerate(tasks):
        for path, container in iter_containers(task, ("spec", "tasks", i)):
            if path[-2] != "containers":
                continue
            current = container.setdefault("env", [])
            if not isinstance(current, list):
                raise error_at((*path, "env"), "must be a list")
            positions = {e.get("name"): j for j, e in enumerate(current) if isinstance(e, dict)}
            for entry in entries:
                copy = clone(entry)
                if entry["name"] in positions:
                    current[positions[entry["name"]]] = copy
                else:
                    positions[entry["name"]] = len(current)
                    current.append(copy)


def apply_resources(tasks: list[dict[str, Any]], resources: Mapping[str, Any]) -> None:
    """Merge ``{"limits": {...}, "requests": {...}}`` into the main container of each named
    task, per resource name; a ``None`` quantity removes that resource."""
    for name, given, path, i in _per_task(tasks, resources, "resources"):
        value = _mapping(given, path, f"resources of task {name!r}")
        unknown = set(value) - set(_RESOURCE_KEYS)
        if unknown:
            raise error_at(
                path, f"only limits and requests can be overridden, got {sorted(unknown)}"
            )
        cpath, container = main_container(tasks[i], ("spec", "tasks", i))
        current = container.setdefault("resources", {})
        if not isinstance(current, dict):
            raise error_at((*cpath, "resources"), "must be a mapping")
        for kind in _RESOURCE_KEYS:
            if kind not in value:
                continue
            merged = current.setdefault(kind, {})
            if not isinstance(merged, dict):
                raise error_at((*cpath, "resources", kind), "must be a mapping")
            for resource, quantity in _mapping(value[kind], (*path, kind), kind).items():
                if quantity is None:
                    merged.pop(resource, None)
                else:
                    check_quantity(quantity, (*path, kind, resource))
                    merged[resource] = quantity
            if not merged:
                del current[kind]


def apply_container_list(
    tasks: list[dict[str, Any]], key: str, overrides: Mapping[str, Any]
) -> None:
    """Replace ``command`` or ``args`` of the main container of each named task."""
    for _, value, path, i in _per_task(tasks, overrides, key):
        if isinstance(value, str | bytes) or not isinstance(value, Sequence):
            raise error_at(path, f"{key} must be a list of strings, not {type_name(value)}")
        items = [as_text(item, (*path, j), f"{key} item") for j, item in enumerate(value)]
        main_container(tasks[i], ("spec", "tasks", i))[1][key] = items


def _string_map(values: Any, path: Path, *, labels: bool) -> dict[str, str]:
    out = {}
    for key, value in _mapping(values, path, str(path[0])).items():
        if not naming.is_qualified_name(key):
            raise error_at((*path, str(key)), f"{show(key)} is not a valid label/annotation key")
        text = as_text(value, (*path, key), "value")
        if labels and not naming.is_label_value(text):
            # Overrides come from code (the operator), which can call naming.label_value;
            # rewriting them here would break the selectors that code builds from them.
            raise error_at(
                (*path, key),
                f"{text!r} is not a valid label value (use naming.label_value to make one)",
            )
        out[key] = text
    return out


def merge_metadata(target: dict[str, Any], key: str, values: dict[str, str], path: Path) -> None:
    current = target.setdefault(key, {})
    if not isinstance(current, dict):
        raise error_at((*path, key), "must be a mapping")
    current.update(values)


def apply_service_account(tasks: list[dict[str, Any]], name: Any) -> None:
    """Run every pod as ``name``: set ``serviceAccountName`` and drop the deprecated
    ``serviceAccount`` alias, so no other account is left in the pod template."""
    if not naming.is_dns1123_subdomain(name):
        raise error_at(("service_account",), f"{show(name)} is not a valid service account name")
    for task in tasks:
        spec = pod_spec(task)
        if spec is not None:
            spec.pop("serviceAccount", None)
            spec["serviceAccountName"] = name


@dataclass(frozen=True, kw_only=True)
class TaskOverrides:
    """What this run changes in the template's tasks, each with its merge rule; ``None``
    leaves the template's own."""

    replicas: Mapping[str, int | str] | None = option(
        None,
        """task name -> replicas, e.g. ``{"worker": 3}``: an int or a digit string (as a
        Trigger form gives), 0..``max_replicas``. The gang's ``minAvailable`` follows
        (``gang``).""",
        typed=True,
        renderer="json",
    )
    image: str | Mapping[str, str] | None = option(
        None,
        """one image for every container of every task, or task name -> image for the task's
        main container (the one named like the task, else the first).""",
    )
    env: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = option(
        None,
        """``{name: value}`` or a list of ``{"name", "value"|"valueFrom"}`` merged by name into
        every container (not init containers); the override wins. Numbers and booleans are
        formatted as text.""",
        templated=True,
    )
    resources: Mapping[str, Mapping[str, Any]] | None = option(
        None,
        """task name -> ``{"limits": {...}, "requests": {...}}`` merged per resource into the
        main container; a ``None`` quantity removes the resource.""",
    )
    command: Mapping[str, Sequence[Any]] | None = option(
        None, "task name -> list, replacing the main container's command.", templated=True
    )
    args: Mapping[str, Sequence[Any]] | None = option(
        None, "task name -> list, replacing the main container's args.", templated=True
    )
    labels: Mapping[str, Any] | None = option(None, "merged into the job's labels (override wins).")
    annotations: Mapping[str, Any] | None = option(
        None, "merged into the job's annotations (override wins)."
    )
    pod_labels: Mapping[str, Any] | None = option(
        None, "merged into every task's pod template labels."
    )
    pod_annotations: Mapping[str, Any] | None = option(
        None, "merged into every task's pod template annotations.", templated=True
    )
    service_account: str | None = option(
        None,
        """set ``serviceAccountName`` on every pod template (and drop the deprecated
        ``serviceAccount``); a template may name another only when it is in
        ``allowed_service_accounts``.""",
        templated=True,
    )

    def apply(
        self,
        job: dict[str, Any],
        tasks: list[dict[str, Any]],
        max_replicas: int,
        applied: Callable[[str], None],
    ) -> None:
        """Apply each override given, with its own merge rule, calling ``applied`` with its
        name after each (the queue's guardrails judge it, ``guardrails.py``)."""
        given: list[tuple[str, Any, Callable[[Any], None]]] = [
            ("replicas", self.replicas, lambda v: apply_replicas(tasks, v, max_replicas)),
            ("image", self.image, lambda v: apply_image(tasks, v)),
            ("env", self.env, lambda v: apply_env(tasks, v)),
            # The operator's name for it: ``resources`` is Airflow's own there.
            ("container_resources", self.resources, lambda v: apply_resources(tasks, v)),
            ("command", self.command, lambda v: apply_container_list(tasks, "command", v)),
            ("args", self.args, lambda v: apply_container_list(tasks, "args", v)),
            ("service_account", self.service_account, lambda v: apply_service_account(tasks, v)),
        ]
        for name, value, apply in given:
            if value is not None:
                apply(value)
                applied(name)
        self.apply_metadata(job, tasks)
        applied("labels and annotations")

    def apply_metadata(self, job: dict[str, Any], tasks: list[dict[str, Any]]) -> None:
        """Merge labels/annotations into the job's metadata and pod_labels/pod_annotations into
        every task's pod template metadata; the override wins on equal keys."""
        for key, given in (("labels", self.labels), ("annotations", self.annotations)):
            if given is not None:
                values = _string_map(given, (key,), labels=key == "labels")
                merge_metadata(job["metadata"], key, values, ("metadata",))
        for key, given in (("labels", self.pod_labels), ("annotations", self.pod_annotations)):
            if given is None:
                continue
            values = _string_map(given, (f"pod_{key}",), labels=key == "labels")
            for i, task in enumerate(tasks):
                path: Path = ("spec", "tasks", i)
                metadata = pod_metadata(task, path)
                merge_metadata(metadata, key, values, (*path, "template", "metadata"))

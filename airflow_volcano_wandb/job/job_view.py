"""A Volcano Job, and the metadata of any Kubernetes object, read once into typed fields.

Pure: the hooks hand back the plain dicts the API returns (callers that need the rest keep
them); the modules that read a job read it through :meth:`JobView.of`, and a pod's or
Secret's metadata through :meth:`ObjectMeta.of`, so every missing field means one thing
everywhere. Tolerant: a field the API left out reads as empty, never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from airflow_volcano_wandb.template.elastic import ELASTIC_ANNOTATION

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def epoch_seconds(timestamp: Any) -> float | None:
    """An API timestamp (RFC 3339, as ``creationTimestamp`` or a condition's
    ``lastTransitionTime``) as epoch seconds; ``None`` for a field the API left empty."""
    if not timestamp:
        return None
    return datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp()


def api_timestamp(epoch: float) -> str:
    """Epoch seconds as the API writes a timestamp (RFC 3339, UTC, whole seconds)."""
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else _EMPTY


@dataclass(frozen=True)
class ObjectMeta:
    """The ``metadata`` of a Kubernetes object (a job, a pod, a Secret, a PodGroup)."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    owner_uids: frozenset[str] = frozenset()

    @classmethod
    def of(cls, obj: Mapping[str, Any] | None) -> ObjectMeta:
        """The metadata of ``obj`` (``None`` or an object without any reads as empty)."""
        meta = _mapping(_mapping(obj).get("metadata"))
        return cls(
            name=str(meta.get("name") or ""),
            namespace=str(meta.get("namespace") or ""),
            uid=str(meta.get("uid") or ""),
            resource_version=str(meta.get("resourceVersion") or ""),
            labels=dict(_mapping(meta.get("labels"))),
            annotations=dict(_mapping(meta.get("annotations"))),
            creation_timestamp=meta.get("creationTimestamp") or None,
            deletion_timestamp=meta.get("deletionTimestamp") or None,
            owner_uids=frozenset(
                str(ref.get("uid"))
                for ref in meta.get("ownerReferences") or []
                if isinstance(ref, Mapping) and ref.get("uid")
            ),
        )

    def annotation(self, name: str) -> str | None:
        """An annotation's value as text, ``None`` when it is not set."""
        value = self.annotations.get(name)
        return str(value) if value is not None else None


@dataclass(frozen=True)
class TaskView:
    """One task of a job's spec: its name, replicas and pod template (and ``minAvailable``)."""

    name: str
    replicas: int
    template: Mapping[str, Any]
    min_available: int | None = None

    @property
    def containers(self) -> list[Mapping[str, Any]]:
        return list(_mapping(self.template.get("spec")).get("containers") or [])


def task_replicas(task: Mapping[str, Any]) -> int:
    """A task's replicas. Volcano's ``replicas`` is an ``int32`` with ``omitempty``: the API
    leaves a zero out, and Volcano 1.14 keeps a task created without one as it is and starts
    no pod for it (its ``minAvailable`` defaults to 0), so a missing count is 0, not 1."""
    return int(task.get("replicas") or 0)


def _of_meta(attribute: str) -> Any:
    """A read-only property of the view: its ``meta``'s ``attribute``."""
    return property(lambda view: getattr(view.meta, attribute))


@dataclass(frozen=True)
class JobView:
    """A ``batch.volcano.sh/v1alpha1`` Job as the provider reads it; ``raw`` is the dict."""

    meta: ObjectMeta
    phase: str = ""
    reason: str = ""
    message: str = ""
    transition_time: str | None = None
    retry_count: int = 0
    min_available: Any = None
    tasks: tuple[TaskView, ...] = ()
    conditions: tuple[Mapping[str, Any], ...] = ()
    pods_by_task: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, job: Mapping[str, Any] | None) -> JobView:
        """Read ``job`` once (``None``, or a bare ``{"metadata": ...}``, reads as empty)."""
        job = _mapping(job)
        spec, status = _mapping(job.get("spec")), _mapping(job.get("status"))
        state = _mapping(status.get("state"))
        return cls(
            meta=ObjectMeta.of(job),
            phase=str(state.get("phase") or ""),
            reason=str(state.get("reason") or ""),
            message=str(state.get("message") or ""),
            transition_time=state.get("lastTransitionTime"),
            retry_count=int(status.get("retryCount") or 0),
            min_available=spec.get("minAvailable"),
            tasks=tuple(
                TaskView(
                    str(t.get("name") or ""),
                    task_replicas(t),
                    _mapping(t.get("template")),
                    t["minAvailable"] if type(t.get("minAvailable")) is int else None,
                )
                for t in spec.get("tasks") or []
                if isinstance(t, Mapping)
            ),
            conditions=tuple(_mapping(c) for c in status.get("conditions") or []),
            pods_by_task=_pods_by_task(status),
            raw=job,
        )

    name = _of_meta("name")
    namespace = _of_meta("namespace")
    uid = _of_meta("uid")
    resource_version = _of_meta("resource_version")
    labels = _of_meta("labels")
    annotations = _of_meta("annotations")
    deletion_timestamp = _of_meta("deletion_timestamp")

    @property
    def replicas(self) -> dict[str, int]:
        """Each named task's replicas, in template order."""
        return {task.name: task.replicas for task in self.tasks if task.name}

    @property
    def needed(self) -> dict[str, int]:
        """Each named task's pods the job needs running: its replicas, or for an elastic job
        (``elastic=``, its annotation) its ``minAvailable``: running with fewer workers than
        it asks for is running, not waiting to be placed."""
        elastic = ELASTIC_ANNOTATION in self.annotations
        return {
            task.name: task.min_available
            if elastic and task.min_available is not None
            else task.replicas
            for task in self.tasks
            if task.name
        }

    def pod_names(self) -> list[str]:
        """The names Volcano gives the job's pods, ``<job>-<task>-<index>``, in order."""
        return [
            f"{self.name}-{task.name}-{index}"
            for task in self.tasks
            for index in range(task.replicas)
        ]


def _pods_by_task(status: Mapping[str, Any]) -> dict[str, dict[str, int]]:
    counts = _mapping(status.get("taskStatusCount"))
    return {
        str(task): {str(p): int(n) for p, n in _mapping(_mapping(state).get("phase")).items()}
        for task, state in counts.items()
    }

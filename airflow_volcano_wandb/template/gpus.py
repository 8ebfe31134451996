"""What a job's gang asks of the cluster's GPUs, and the per-DAG cap on it (pure).

A pod's GPUs are the extended resources named ``<vendor>/gpu`` (``nvidia.com/gpu``,
``amd.com/gpu``) in its containers' limits; Kubernetes requires requests of an extended
resource to equal its limits, so limits say it all. Init containers run before the others
and release what they held, so they do not add to the pod's GPUs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from airflow_volcano_wandb.template.errors import Problems


def is_gpu_resource(name: str) -> bool:
    """Whether a resource name is a GPU (``nvidia.com/gpu``, ``amd.com/gpu``...)."""
    return name.endswith("/gpu")


def container_gpus(container: Mapping[str, Any]) -> int:
    """GPUs one container is given: the sum of its ``<vendor>/gpu`` limits (a limit that is
    not a whole number counts as none here; validation refuses it)."""
    resources = container.get("resources")
    limits = resources.get("limits") if isinstance(resources, Mapping) else None
    if not isinstance(limits, Mapping):
        return 0
    return sum(
        int(value)
        for name, value in limits.items()
        if is_gpu_resource(str(name)) and is_gpu_count(value)
    )


def is_gpu_count(value: Any) -> bool:
    """Whether a GPU limit is a whole number, as Kubernetes requires of extended resources."""
    return not isinstance(value, bool) and str(value).isdigit()


def pod_gpus(pod_template: Mapping[str, Any]) -> int:
    """GPUs one pod of this template holds: the sum over its containers' GPU limits."""
    containers = (pod_template.get("spec") or {}).get("containers") or []
    return sum(container_gpus(c) for c in containers if isinstance(c, Mapping))


def gang_gpus(tasks: Sequence[Mapping[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per task: ``(replicas, GPUs per pod)``."""
    return {
        str(task.get("name")): (
            int(task.get("replicas") or 0),
            pod_gpus(task.get("template") or {}),
        )
        for task in tasks
    }


def total_gpus(tasks: Sequence[Mapping[str, Any]]) -> int:
    """GPUs the whole gang holds: per task, its replicas times one pod's GPUs."""
    return sum(replicas * gpus for replicas, gpus in gang_gpus(tasks).values())


def gpu_budget_problems(tasks: Sequence[Mapping[str, Any]], max_total_gpus: int) -> Problems:
    """The job refused when its gang asks for more than ``max_total_gpus`` GPUs in all."""
    total = total_gpus(tasks)
    if total <= max_total_gpus:
        return []
    per_task = gang_gpus(tasks)
    shares = ", ".join(
        f"{name} {replicas}x{gpus}" for name, (replicas, gpus) in per_task.items() if gpus
    )
    return [
        (
            ("spec", "tasks"),
            f"the gang asks for {total} GPUs in all ({shares}), more than "
            f"max_total_gpus={max_total_gpus}",
        )
    ]

"""Will the job fit? Its gang's needs against its Volcano queue and the nodes (pure).

A pod needs its containers' requests (a missing request defaults to the limit), summed, or
its largest init container's if larger. The gang is the pods ``minAvailable`` counts, taken
task by task in the job's order: the share Volcano gives the PodGroup's ``minResources``.
``Fit.never``: more than the queue's ``spec.capability``, or than the nodes could ever hold
(every node counted, taints and selectors ignored: only "never" when no placement could
work). ``Fit.later``: the queue's capability in use, or past its ``spec.deserved`` share. The
nodes' free room is not judged (it would take reading every pod). See docs/operator.md
(``fit_check``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from airflow_volcano_wandb.job.job_view import JobView, ObjectMeta
from airflow_volcano_wandb.template.quantity import parse_quantity

#: ``fit_check=`` values: fail on a job that can never be placed, only log it, or skip the check.
FIT_CHECK_MODES = ("fail", "warn", "off")

Resources = dict[str, Decimal]


@dataclass(frozen=True)
class GangTask:
    """One task's share of the gang: ``pods`` pods, each needing ``per_pod``."""

    name: str
    pods: int
    per_pod: Resources


@dataclass(frozen=True)
class Fit:
    """The verdict: why the gang can never be placed, and why it may wait."""

    never: tuple[str, ...] = ()
    later: tuple[str, ...] = ()


def check_mode(mode: str) -> None:
    if mode not in FIT_CHECK_MODES:
        raise ValueError(f"fit_check must be one of {', '.join(FIT_CHECK_MODES)}, not {mode!r}")


def resources(values: Mapping[str, Any] | None) -> Resources:
    """A resource list (``{"cpu": "500m", ...}``) as exact numbers."""
    return {str(name): parse_quantity(value) for name, value in (values or {}).items()}


def _total(needs: Iterable[tuple[Mapping[str, Decimal], int]]) -> Resources:
    """Each resource summed over ``needs``: resource lists, each counted so many times."""
    total: Resources = {}
    for more, times in needs:
        for name, value in more.items():
            total[name] = total.get(name, Decimal(0)) + value * times
    return total


def _container_needs(container: Mapping[str, Any]) -> Resources:
    limits_and_requests = container.get("resources") or {}
    return {
        **resources(limits_and_requests.get("limits")),
        **resources(limits_and_requests.get("requests")),
    }


def pod_needs(pod_template: Mapping[str, Any]) -> Resources:
    """What one pod of this template asks of a node, per resource (zero ones left out)."""
    spec = pod_template.get("spec") or {}
    needs = _total((_container_needs(container), 1) for container in spec.get("containers") or [])
    for container in spec.get("initContainers") or []:
        for name, value in _container_needs(container).items():
            needs[name] = max(needs.get(name, Decimal(0)), value)
    return {name: value for name, value in needs.items() if value > 0}


def gang(job: Mapping[str, Any]) -> list[GangTask]:
    """The tasks' shares of the gang: their first pods, in order, up to ``minAvailable``."""
    view = JobView.of(job)
    left = view.min_available
    if type(left) is not int or left <= 0:
        left = sum(task.replicas for task in view.tasks)
    shares = []
    for task in view.tasks:
        pods = min(task.replicas, left)
        left -= pods
        if pods:
            shares.append(GangTask(task.name, pods, pod_needs(task.template)))
    return shares


def gang_total(tasks: Iterable[GangTask]) -> Resources:
    return _total((task.per_pod, task.pods) for task in tasks)


def amount(value: Decimal) -> str:
    """A number as a message shows it: bytes as Gi when whole, no trailing zeros."""
    gib = Decimal(1024) ** 3
    if value >= gib and value % (gib / 1024) == 0:
        return f"{amount(value / gib)}Gi"
    return f"{value.normalize():f}"


def queue_fit(tasks: Sequence[GangTask], queue: Mapping[str, Any]) -> Fit:
    """The gang against its queue's capability (never), allocated and deserved (later)."""
    name = ObjectMeta.of(queue).name or "?"
    spec, status = queue.get("spec") or {}, queue.get("status") or {}
    capability, deserved = resources(spec.get("capability")), resources(spec.get("deserved"))
    allocated = resources(status.get("allocated"))
    never, later = [], []
    for resource, needed in sorted(gang_total(tasks).items()):
        used = allocated.get(resource, Decimal(0))
        cap = capability.get(resource)
        if cap is not None and needed > cap:
            never.append(
                f"needs {amount(needed)} {resource} in one gang; queue '{name}' is capped at "
                f"{amount(cap)}"
            )
        elif cap is not None and used + needed > cap:
            later.append(
                f"queue '{name}' has {amount(used)} of its {amount(cap)} {resource} in use and the "
                f"gang needs {amount(needed)}: it waits until the queue has room"
            )
        elif resource in deserved and used + needed > deserved[resource]:
            later.append(
                f"the gang's {amount(needed)} {resource} takes queue '{name}' ({amount(used)} in "
                f"use) past its deserved {amount(deserved[resource])}: it runs only while other "
                "queues leave room, and may be reclaimed"
            )
    return Fit(tuple(never), tuple(later))


def _slots(per_pod: Resources, node: Resources) -> int | float:
    """How many such pods one node holds (ignoring what already runs there)."""
    return min(
        (int(node.get(name, Decimal(0)) // value) for name, value in per_pod.items()),
        default=float("inf"),
    )


def node_fit(tasks: Sequence[GangTask], nodes: Sequence[Mapping[str, Any]]) -> Fit:
    """The gang against the nodes' allocatable resources: only "never" (see the module)."""
    allocatable = [resources((node.get("status") or {}).get("allocatable")) for node in nodes]
    never = []
    for task in tasks:
        slots = sum(_slots(task.per_pod, node) for node in allocatable)
        if slots == 0:
            never.append(f"one '{task.name}' pod {_too_big(task.per_pod, allocatable)}")
        elif slots < task.pods:
            never.append(
                f"the gang needs {task.pods} '{task.name}' pods of {_describe(task.per_pod)}; "
                f"the {len(nodes)} nodes hold at most {slots} such pods"
            )
    if never:
        return Fit(tuple(never))
    # Every pod of the gang needs at least the least any task's pod needs of each resource,
    # so no node holds more gang pods than it holds of that smallest pod.
    smallest = _smallest(tasks)
    pods = sum(task.pods for task in tasks)
    slots = sum(_slots(smallest, node) for node in allocatable)
    if len(tasks) > 1 and slots < pods:
        never.append(
            f"the gang's {pods} pods each need at least {_describe(smallest)}; the "
            f"{len(nodes)} nodes hold at most {slots} such pods"
        )
        return Fit(tuple(never))
    everything = _total((node, 1) for node in allocatable)
    for resource, needed in sorted(gang_total(tasks).items()):
        if needed > everything.get(resource, Decimal(0)):
            never.append(
                f"needs {amount(needed)} {resource} in one gang; the {len(nodes)} nodes have "
                f"{amount(everything.get(resource, Decimal(0)))} in all"
            )
    return Fit(tuple(never))


def _smallest(tasks: Sequence[GangTask]) -> Resources:
    """Per resource, the least any task's pod needs (resources some pod needs none of left out)."""
    names = set.intersection(*(set(task.per_pod) for task in tasks)) if tasks else set()
    return {name: min(task.per_pod[name] for task in tasks) for name in sorted(names)}


def _describe(per_pod: Resources) -> str:
    return ", ".join(f"{amount(value)} {name}" for name, value in sorted(per_pod.items()))


def _too_big(per_pod: Resources, allocatable: Sequence[Resources]) -> str:
    """Why no node holds the pod: the resource no node has enough of, or all of them."""
    for name, value in sorted(per_pod.items()):
        largest = max((node.get(name, Decimal(0)) for node in allocatable), default=Decimal(0))
        if value > largest:
            return f"needs {amount(value)} {name}; the largest node has {amount(largest)}"
    return f"needs {_describe(per_pod)}; no node has all of that at once"


def verdict(
    job: Mapping[str, Any],
    queue: Mapping[str, Any] | None,
    nodes: Sequence[Mapping[str, Any]] | None,
) -> Fit:
    """Whether ``job`` can be placed; ``None``: that side was not read (no permission)."""
    tasks = gang(job)
    parts = [queue_fit(tasks, queue) if queue is not None else Fit()]
    parts.append(node_fit(tasks, nodes) if nodes else Fit())
    return Fit(
        tuple(reason for part in parts for reason in part.never),
        tuple(reason for part in parts for reason in part.later),
    )

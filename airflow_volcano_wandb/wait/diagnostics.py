"""Why a Volcano job failed or never started, from its pods, PodGroup and events.

Pure: takes the API's objects as plain camelCase dicts (what ``sanitize_for_serialization``
gives) and returns facts and sentences. ``job_report`` fetches, this module explains.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_volcano_wandb.job.endings import Ending, of_reason
from airflow_volcano_wandb.job.job_view import JobView, ObjectMeta
from airflow_volcano_wandb.template import master_task_name
from airflow_volcano_wandb.wait.wandb_stop import is_stop

TASK_LABELS = ("volcano.sh/task-spec", "volcano.sh/task-name")


@dataclass(frozen=True)
class ContainerFailure:
    """A container that ended badly, or is stuck waiting for a reason worth telling."""

    pod: str
    task: str
    container: str
    exit_code: int | None
    reason: str
    message: str = ""

    def describe(self) -> str:
        where = f"task {self.task or '?'} pod {self.pod}"
        if not self.container:  # the pod itself failed (evicted, preempted)
            text = f"{where} was stopped: {self.reason or 'no reason given'}"
        elif self.exit_code is not None:
            reason = f" ({self.reason})" if self.reason else ""
            text = f"{where} container {self.container} exited with code {self.exit_code}{reason}"
        else:
            text = f"{where} container {self.container} is waiting: {self.reason}"
        return f"{text}: {self.message}" if self.message else text


def _pod_stopped(pod: str, task: str, reason: Any, message: str) -> ContainerFailure:
    """A pod stopped as a whole (evicted, preempted, failed): no container to name."""
    return ContainerFailure(pod, task, "", None, str(reason or ""), message)


def task_of(pod: Mapping[str, Any]) -> str:
    """The Volcano task a pod belongs to (Volcano sets it as a label and an annotation)."""
    meta = ObjectMeta.of(pod)
    for source in (meta.labels, meta.annotations):
        for key in TASK_LABELS:
            if source.get(key):
                return str(source[key])
    return ""


#: The causes a container waiting to start shows (their reasons are worth surfacing while the
#: pod is still Pending: they seldom fix themselves), the most specific first.
STUCK = (Ending.IMAGE_PULL, Ending.CONTAINER_CONFIG)
STUCK_WAITING_REASONS = frozenset({"CrashLoopBackOff", *(r for e in STUCK for r in e.row.reasons)})


#: A pod as read: the hooks' dicts, a pod watch's copies.
Pod = TypeVar("Pod", bound=Mapping[str, Any])
#: The phases of a pod whose container started: it has a log.
STARTED_POD_PHASES = ("Running", "Succeeded", "Failed")


def started_master_pod(pods: Iterable[Pod], master: str | None) -> Pod | None:
    """The ``master`` task's first started pod by name (rank 0 first): the log worth reading."""
    started = (p for p in pods if (p.get("status") or {}).get("phase") in STARTED_POD_PHASES)
    return _first_pod(started, master)


def master_pod(pods: Iterable[Pod], job: Mapping[str, Any] | None) -> Pod | None:
    """The pod of the job's master task (its plugin's ``--master``, e.g. ``chief``), if any."""
    return _first_pod(pods, master_task_name(job) if job is not None else None)


def _first_pod(pods: Iterable[Pod], task: str | None) -> Pod | None:
    """``task``'s first pod by name (rank 0 first); ``None`` for no task."""
    of_task = [p for p in pods if task is not None and task_of(p) == task]
    return min(of_task, key=lambda p: ObjectMeta.of(p).name, default=None)


def container_failures(
    pods: Iterable[Mapping[str, Any]], master_task: str | None = None
) -> list[ContainerFailure]:
    """Containers that exited non-zero or are stuck, the master task's first, then by pod."""
    failures = []
    for pod in pods:
        name = ObjectMeta.of(pod).name
        task = task_of(pod)
        status = pod.get("status") or {}
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            last = cs.get("lastState") or {}
            terminated: dict[str, Any] = state.get("terminated") or last.get("terminated") or {}
            ended = bool(terminated) and int(terminated.get("exitCode") or 0) != 0
            why: dict[str, Any] = terminated if ended else state.get("waiting") or {}
            if ended or why.get("reason") in STUCK_WAITING_REASONS:
                failures.append(
                    ContainerFailure(
                        pod=name,
                        task=task,
                        container=str(cs.get("name") or ""),
                        exit_code=int(terminated["exitCode"]) if ended else None,
                        reason=str(why.get("reason") or ""),
                        message=str(why.get("message") or "").strip(),
                    )
                )
        failed = status.get("phase") == "Failed" and status.get("reason")
        if failed and not any(f.pod == name for f in failures):
            # Evicted or otherwise killed pods carry the reason on the pod, not a container.
            message = str(status.get("message") or "")
            failures.append(_pod_stopped(name, task, status.get("reason"), message))
    return sorted(failures, key=lambda f: (f.task != master_task, f.pod, f.container))


@dataclass(frozen=True)
class Classification:
    """A failure's cause, as one of the endings, and the container (or pod) that shows it,
    when one does: ``FAILED`` when no pod or event says why any more, ``PENDING_TIMEOUT`` for
    a gang not placed for want of room."""

    kind: Ending
    failure: ContainerFailure | None = None


def classify(
    job: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
    *,
    never_started: bool = False,
) -> Classification:
    """Why the job failed (``never_started``: why its gang was not placed in time).

    The most specific cause wins, in this order: an image that cannot be pulled, a container
    that cannot be created as configured, a rank whose W&B run was stopped from W&B (its exit
    ended the others), a rank preempted or
    evicted (its containers' exit codes are the kill's, not the trainer's), a container killed
    for memory, any other non-zero exit; else the job-level ending. ``events``: about the job
    (``None`` once gone), its PodGroup and its pods, also pods now gone.
    """
    master = task_of(master_pod(pods, job) or {}) or None
    failures = container_failures(pods, master)
    for cause in STUCK:
        stuck = [f for f in failures if f.exit_code is None and of_reason(f.reason) is cause]
        if stuck:
            return Classification(cause, stuck[0])
    if never_started:
        return Classification(Ending.PENDING_TIMEOUT)
    for failure in failures:
        if is_stop(failure.exit_code, failure.message):
            return Classification(Ending.STOPPED_FROM_WANDB, failure)
    evicted = _evicted(job, pods, events)
    if evicted is not None:
        return Classification(Ending.PREEMPTED, evicted)
    for failure in failures:
        if of_reason(failure.reason) is Ending.OOM_KILLED:
            return Classification(Ending.OOM_KILLED, failure)
    if failures:
        return Classification(Ending.EXIT_CODE, failures[0])
    return Classification(Ending.FAILED)


def _evicted(
    job: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    events: Sequence[Mapping[str, Any]],
) -> ContainerFailure | None:
    """The first rank a pod's status or an event shows preempted or evicted, if any."""
    for pod in sorted(pods, key=lambda p: ObjectMeta.of(p).name):
        status = pod.get("status") or {}
        conditions = status.get("conditions") or []
        targeted = (c for c in conditions if c.get("type") == "DisruptionTarget")
        disruption = next((c for c in targeted if c.get("status") == "True"), None)
        if of_reason(status.get("reason") or "") is Ending.PREEMPTED or disruption is not None:
            reason = status.get("reason") or (disruption or {}).get("reason")
            message = str(status.get("message") or (disruption or {}).get("message") or "")
            return _pod_stopped(ObjectMeta.of(pod).name, task_of(pod), reason, message)
    for event in _newest_first(events):
        involved = event.get("involvedObject") or {}
        if (
            involved.get("kind") == "Pod"
            and of_reason(event.get("reason") or "") is Ending.PREEMPTED
        ):
            name = str(involved.get("name") or "")
            message = str(event.get("message") or "").strip()
            task = _task_from_pod_name(job, name)
            return _pod_stopped(name, task, event.get("reason"), message)
    return None


def pod_names(job: Mapping[str, Any]) -> set[str]:
    """The names Volcano gives the job's pods (``<job>-<task>-<index>``), also once deleted,
    so the events of a preempted pod can still be found."""
    return set(JobView.of(job).pod_names())


def _task_from_pod_name(job: Mapping[str, Any] | None, pod: str) -> str:
    view = JobView.of(job)
    for task in view.tasks:
        prefix = f"{view.name}-{task.name}-"
        if pod.startswith(prefix) and pod[len(prefix) :].isdigit():
            return task.name
    return ""


#: The scheduler's warnings of a gang it could not place.
UNPLACED = ("Unschedulable", "FailedScheduling")


def unschedulable_reason(
    podgroups: Sequence[Mapping[str, Any]], events: Sequence[Mapping[str, Any]]
) -> str:
    """Volcano's own words for why a gang cannot be placed, or ``""`` when it has given none.

    The scheduler's per-node summary (``0/4 nodes are available: 4 Insufficient
    nvidia.com/gpu``) comes from events; the PodGroup's Unschedulable condition says how much
    of the gang is stuck. Both are given when both exist.
    """
    condition_text = ""
    for podgroup in podgroups:
        for condition in (podgroup.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
                condition_text = str(condition.get("message") or condition.get("reason") or "")
    newest = [(event, str(event.get("message") or "")) for event in _newest_first(events)]
    by_nodes = (m for _, m in newest if "nodes are available" in m or "Insufficient" in m)
    node_text = next(by_nodes, "") or next(
        (m for e, m in newest if e.get("type") == "Warning" and e.get("reason") in UNPLACED), ""
    )
    parts = dict.fromkeys(text.strip().rstrip(".") for text in (node_text, condition_text) if text)
    return "; ".join(parts)


def warning_events(events: Sequence[Mapping[str, Any]], limit: int = 10) -> list[str]:
    """The job's most recent warnings as ``Reason: message`` lines, newest last, no repeats."""
    lines: list[str] = []
    for event in reversed(_newest_first(events)):
        if event.get("type") != "Warning":
            continue
        involved = event.get("involvedObject") or {}
        line = (
            f"{involved.get('kind', '?')}/{involved.get('name', '?')} "
            f"{event.get('reason', '')}: {str(event.get('message') or '').strip()}"
        )
        if line not in lines:
            lines.append(line)
    return lines[-limit:]


def _newest_first(events: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    def when(event: Mapping[str, Any]) -> str:
        created = ObjectMeta.of(event).creation_timestamp
        return str(event.get("lastTimestamp") or event.get("eventTime") or created or "")

    return sorted(events, key=when, reverse=True)


def pods_worth_a_log(
    failures: Sequence[ContainerFailure], master: Mapping[str, Any] | None
) -> list[str]:
    """The pods whose log tail explains a failure: the first failed one, then the master."""
    names = [f.pod for f in failures[:1]]
    if master is not None:
        names.append(ObjectMeta.of(master).name)
    return list(dict.fromkeys(name for name in names if name))


def failure_report(
    failures: Sequence[ContainerFailure],
    logs: Mapping[str, str],
    events: Sequence[Mapping[str, Any]],
    log_lines: int,
) -> list[str]:
    """Everything a person needs to see why the job ended badly, as log lines; ``logs``: pod
    names to their log text (:func:`pods_worth_a_log`)."""
    lines = [f.describe() for f in failures]
    for pod_name, text in logs.items():
        log = tail(text, log_lines)
        if log:
            lines.append(f"last {log_lines} log lines of {pod_name}:")
            lines.extend("    " + line for line in log.splitlines())
    warnings = warning_events(events)
    if warnings:
        lines.append("warning events:")
        lines.extend("    " + e for e in warnings)
    return lines


def tail(text: str, lines: int) -> str:
    """The last ``lines`` lines of a log."""
    return "\n".join(text.rstrip("\n").splitlines()[-lines:])

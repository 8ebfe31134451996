"""What a finished job's GPUs cost, per rank (pure): GPU-seconds from each pod's run time.

A rank's GPU-seconds are its pod's GPUs (``<vendor>/gpu`` limits) times the seconds from the
pod's ``status.startTime`` to its containers' last ``finishedAt`` (or ``now``); a pod that
never started cost nothing. Ranks are named by their pod's Volcano suffix (``master-0``).
Volcano removes the ranks still running when the master's ``CompleteJob`` fired
(:func:`removed_ranks`): those are counted, as a lower bound, from the moment the gang was
seen whole to the job's end, with the GPUs their task's pod template asks for.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_volcano_wandb.job.job_view import JobView, ObjectMeta, epoch_seconds
from airflow_volcano_wandb.template.elastic import ELASTIC_ANNOTATION
from airflow_volcano_wandb.template.gpus import pod_gpus


def _rank(pod: Mapping[str, Any], job_name: str) -> str:
    name = ObjectMeta.of(pod).name
    return name.removeprefix(f"{job_name}-") if job_name else name


def _ended(pod: Mapping[str, Any], now: float) -> float:
    ends = []
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        ends.append(epoch_seconds(terminated.get("finishedAt")) if terminated else now)
    return max((end for end in ends if end is not None), default=now)


def gpu_seconds(
    pods: Iterable[Mapping[str, Any]],
    job_name: str,
    now: float,
    removed: Mapping[str, int] | None = None,
    removed_ran: float | None = None,
) -> dict[str, float]:
    """GPU-seconds per rank of the job's pods, rounded to a tenth of a second; and of the
    ``removed`` ranks (rank -> GPUs, :func:`removed_ranks`), for ``removed_ran`` seconds each
    (left out when ``None``: how long they ran is not known)."""
    usage: dict[str, float] = {}
    for pod in pods:
        started = epoch_seconds((pod.get("status") or {}).get("startTime"))
        if started is None:
            continue
        seconds = max(0.0, _ended(pod, now) - started)
        usage[_rank(pod, job_name)] = round(seconds * pod_gpus(pod), 1)
    if removed_ran is not None:
        for rank, gpus in (removed or {}).items():
            usage.setdefault(rank, round(max(0.0, removed_ran) * gpus, 1))
    return dict(sorted(usage.items()))


def removed_ranks(job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """The ranks the job's tasks asked for (``<task>-<index>``) of which no pod is left, with
    the GPUs one pod of their task holds."""
    view = JobView.of(job)
    present = {_rank(pod, view.name) for pod in pods}
    removed = {}
    for task in view.tasks:
        gpus = pod_gpus(task.template)
        for index in range(task.replicas):
            rank = f"{task.name}-{index}"
            if rank not in present:
                removed[rank] = gpus
    return removed


def ran_between(start: str | None, end: str | None) -> float | None:
    """Seconds from ``start`` to ``end`` (RFC 3339 timestamps); ``None`` when either is
    missing."""
    started, ended = epoch_seconds(start), epoch_seconds(end)
    return None if started is None or ended is None else max(0.0, ended - started)


def describe(usage: Mapping[str, float]) -> str:
    """One line for the task log: per rank, the total and GPU-hours."""
    total = sum(usage.values())
    ranks = ", ".join(f"{rank} {seconds:g}" for rank, seconds in usage.items())
    hours = f"{total / 3600:.3f} GPU-hours"
    return f"GPU-seconds: {ranks or 'no rank started'} (total {total:g} s = {hours})"


#: The XCom (and the asset event's key) of an elastic job's report (:func:`elastic_report`).
ELASTIC_KEY = "elastic"


def elastic_report(job: Mapping[str, Any], usage: Mapping[str, float] | None) -> dict[str, Any]:
    """An elastic job's (``elastic=``, its annotation) range, how many times it re-formed
    after a loss (Volcano's ``retryCount``: each lost worker's pod it replaced, each restart
    after the master's loss; a worker that joined late is not counted) and the GPU-hours its
    ranks used (``usage``, :func:`gpu_seconds`; ``None`` when unknown); ``{}`` for a job that
    is not elastic."""
    view = JobView.of(job)
    low, _, high = str(view.annotations.get(ELASTIC_ANNOTATION) or "").partition(":")
    if not (low.isdigit() and high.isdigit()):
        return {}
    facts = {"min_workers": int(low), "max_workers": int(high), "reformations": view.retry_count}
    return elastic_report_of(facts, usage)


def elastic_report_of(
    facts: Mapping[str, Any], usage: Mapping[str, float] | None
) -> dict[str, Any]:
    """:func:`elastic_report`'s ``facts`` (read from the job) with the GPU-hours of ``usage``."""
    if not facts:
        return {}
    hours = round(sum(usage.values()) / 3600, 4) if usage else None
    return {**facts, "gpu_hours": hours}

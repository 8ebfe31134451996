"""The restart budget: how many times a job's containers may restart in place.

Pure. Under ``restartPolicy: OnFailure`` (the seed template's) the kubelet restarts a crashed
trainer in its pod, and the pod and the Volcano job stay ``Running``: only the pods'
``containerStatuses`` show the restarts, and a trainer that crashes at every start would hold
its GPUs until ``execution_timeout``. The restarts are counted as Kubernetes Jobs and Kubeflow's
``runPolicy.backoffLimit`` count them (every container of every live pod, over all ranks).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import MISSING, asdict, dataclass, fields
from typing import Any, Self, get_args, get_type_hints

from airflow_volcano_wandb.job.job_view import ObjectMeta

#: The default ``max_container_restarts``. The kubelet waits 10 s before the first restart
#: and doubles the wait up to 5 minutes, so a rank that crashes at every start is restarted
#: for the 4th time (past 3) about 10+20+40+80 = 150 s after its first crash, plus its start-up
#: time at each try: the task fails within minutes. When every rank crashes (the seed's master
#: and worker both fail on the same bug), the count passes 3 in the second round of restarts,
#: about half a minute in. One restart of each rank of a small gang (a transient fault the
#: trainer recovers from) stays within it.
DEFAULT_MAX_CONTAINER_RESTARTS = 3

#: Pod phases whose restarts count, as Kubernetes Jobs count them: a pod that has ended (or
#: is gone) is no longer restarting.
LIVE_POD_PHASES = ("Pending", "Running")


@dataclass(frozen=True)
class RankContainer:
    """The container of one rank that a verdict names (a crash loop, a stall, a start
    failure); it crosses the triggerer boundary as a plain dict (:meth:`to_dict`)."""

    pod: str
    rank: str
    container: str

    @property
    def task(self) -> str:
        """The rank's Volcano task (``worker``): Volcano names pods ``<job>-<task>-<index>``."""
        return task_of_rank(self.rank)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """Read back a ``to_dict`` (e.g. from a trigger event), each field as its type; a field
        with a default may be missing (an older event). Raises on anything else."""
        kinds = get_type_hints(cls)
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in data or f.default is MISSING:
                value, kind = data[f.name], kinds[f.name]
                nullable = type(None) in get_args(kind)
                kind = next((k for k in get_args(kind) if k is not type(None)), kind)
                values[f.name] = None if value is None and nullable else kind(value)
        return cls(**values)


@dataclass(frozen=True)
class CrashLoop(RankContainer):
    """The container whose restart took the job's restarts past the budget, and its last exit.

    ``rank`` is the pod's place in the job (``worker-1``: Volcano's task and index);
    ``restarts`` is the count over all ranks, ``container_restarts`` this container's own.
    """

    restarts: int
    budget: int
    container_restarts: int
    exit_code: int | None = None
    reason: str = ""

    def describe(self) -> str:
        """One sentence for the task log and the exception."""
        reason = f" ({self.reason})" if self.reason else ""
        exit_text = f"last exit code {self.exit_code}{reason}"
        if self.exit_code is None:
            exit_text = "no exit recorded"
        return (
            f"rank {self.rank} (pod {self.pod}) container {self.container} restarted "
            f"{self.container_restarts} time(s), {exit_text}; the job's containers restarted "
            f"{self.restarts} time(s) in all, past max_container_restarts={self.budget}"
        )


def job_pods(pods: Iterable[Mapping[str, Any]], job_uid: str | None) -> list[Mapping[str, Any]]:
    """The pods of this submission (owned by ``job_uid``) that are live and not being deleted
    (a Volcano restart being torn down is no restart of this job's)."""
    live = []
    for pod in pods:
        meta = ObjectMeta.of(pod)
        if job_uid and job_uid not in meta.owner_uids:
            continue
        if meta.deletion_timestamp:
            continue
        if (pod.get("status") or {}).get("phase") not in LIVE_POD_PHASES:
            continue
        live.append(pod)
    return live


def total_restarts(pods: Iterable[Mapping[str, Any]]) -> int:
    """The restarts of every container (init containers too) of ``pods``, summed."""
    return sum(restart_count for _, _, restart_count in _container_statuses(pods))


def crash_loop(
    pods: Iterable[Mapping[str, Any]],
    budget: int | None,
    *,
    job_name: str,
    job_uid: str | None = None,
) -> CrashLoop | None:
    """The crash loop that the job's ``pods`` show: more restarts than ``budget`` (``0``: the
    first restart is too many; ``None``: no budget), of the pods of ``job_uid`` (``None``:
    every pod given); else ``None``. The container named is the one that restarted most (the
    first pod by name among equals): the crash-looping rank, the others at most followed it.
    """
    if budget is None:
        return None
    live = job_pods(pods, job_uid)
    total = total_restarts(live)
    if total <= budget:
        return None
    pod, status, restarts = min(
        _container_statuses(live),
        key=lambda entry: (-entry[2], _name(entry[0]), str(entry[1].get("name") or "")),
    )
    terminated = (status.get("state") or {}).get("terminated") or (
        status.get("lastState") or {}
    ).get("terminated")
    exit_code = (terminated or {}).get("exitCode")
    return CrashLoop(
        pod=_name(pod),
        rank=rank_of(_name(pod), job_name),
        container=str(status.get("name") or ""),
        restarts=total,
        budget=budget,
        container_restarts=restarts,
        exit_code=None if exit_code is None else int(exit_code),
        reason=str((terminated or {}).get("reason") or ""),
    )


def rank_of(pod: str, job_name: str) -> str:
    """A pod's place in its job (``master-0``), from Volcano's ``<job>-<task>-<index>`` name."""
    prefix = f"{job_name}-"
    return pod[len(prefix) :] if job_name and pod.startswith(prefix) else pod


def task_of_rank(rank: str) -> str:
    """A rank's Volcano task (``worker`` of ``worker-1``); ``""`` for a rank of no such shape."""
    task, _, index = rank.rpartition("-")
    return task if index.isdigit() else ""


def _container_statuses(
    pods: Iterable[Mapping[str, Any]],
) -> Iterable[tuple[Mapping[str, Any], Mapping[str, Any], int]]:
    for pod in pods:
        status = pod.get("status") or {}
        for key in ("initContainerStatuses", "containerStatuses"):
            for container in status.get(key) or []:
                yield pod, container, int(container.get("restartCount") or 0)


def _name(pod: Mapping[str, Any]) -> str:
    return ObjectMeta.of(pod).name

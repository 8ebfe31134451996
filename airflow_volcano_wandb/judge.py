"""Judge a job at a moment: keep waiting, or end the wait with an outcome.

Pure. The trigger (on every watch event and timer tick) and the sensor (on every poke) call
:func:`judge` with the job as the apiserver or the watch last showed it, so the two can never
disagree about what a job, a timeout or a half-placed gang means.

A PyTorch DDP job with a static world size makes progress only when every rank runs, so
``pending_timeout`` measures the time until *every* rank is placed and running, not only
until Volcano calls the job ``Running`` (a gang with a ``minAvailable`` below the world size
is ``Running`` with the master alone, which then blocks in ``init_process_group``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from airflow_volcano_wandb.job_status import JobStatus, interpret
from airflow_volcano_wandb.outcome import Outcome, WaitResult

#: Pod phases that mean a rank was placed on a node and started.
STARTED_POD_PHASES = ("Running", "Succeeded", "Failed")


@dataclass(frozen=True)
class WaitTarget:
    """The job a wait is about, and the limits it is held to."""

    name: str
    namespace: str
    #: The uid of the submission waited on; a job of that name with another uid is not it.
    uid: str | None = None
    pending_timeout: float | None = None
    #: Wall-clock epoch seconds at which Airflow's ``execution_timeout`` is reached.
    deadline: float | None = None


def unplaced_ranks(status: JobStatus) -> dict[str, str]:
    """Tasks with ranks not yet started, as ``{"worker": "1/3"}`` (started/replicas)."""
    unplaced = {}
    for task, replicas in status.replicas.items():
        counts = status.pods_by_task.get(task, {})
        started = sum(counts.get(phase, 0) for phase in STARTED_POD_PHASES)
        if started < replicas:
            unplaced[task] = f"{started}/{replicas}"
    return unplaced


def gang_wait_seconds(
    job: Mapping[str, Any] | None, status: JobStatus, now: float, *, gang_seen_whole: bool = False
) -> float | None:
    """How long the job has waited for its whole gang, or ``None`` when it is not waiting.

    ``Pending`` counts from the phase's transition (a restart starts the clock again).
    ``Running`` with ranks missing counts from the job's creation, or from its last
    transition after a restart; once the whole gang has been seen running
    (``gang_seen_whole``), a rank lost later (evicted, being replaced) is Volcano's to
    restore and is not a placement wait.
    """
    if job is None or status.terminal:
        return None
    metadata = job.get("metadata") or {}
    if status.phase in ("", "Pending"):
        since = status.transition_time or metadata.get("creationTimestamp")
    elif status.phase == "Running" and not gang_seen_whole and unplaced_ranks(status):
        since = status.transition_time if status.retry_count else metadata.get("creationTimestamp")
    else:
        return None
    if not since:
        return None
    return now - _epoch(str(since))


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def judge(
    job: Mapping[str, Any] | None,
    target: WaitTarget,
    now: float,
    *,
    gang_seen_whole: bool = False,
) -> WaitResult | None:
    """The wait's result if it ends now, else ``None``.

    ``job`` is the latest copy known to be current (``None``: it does not exist). A job of the
    target's name but another uid counts as the target deleted.
    """
    if job is not None and target.uid and (job.get("metadata") or {}).get("uid") != target.uid:
        job = None
    status = interpret(job, name=target.name, namespace=target.namespace)
    if status.terminal:
        result = WaitResult.from_status(status)
        return result if target.uid is None else _with_uid(result, target.uid)
    if target.pending_timeout is not None:
        waited = gang_wait_seconds(job, status, now, gang_seen_whole=gang_seen_whole)
        if waited is not None and waited >= target.pending_timeout:
            unplaced = unplaced_ranks(status)
            missing = ", ".join(f"{task} {count}" for task, count in unplaced.items())
            return WaitResult(
                outcome=Outcome.PENDING_TIMEOUT,
                name=status.name,
                namespace=status.namespace,
                uid=status.uid,
                phase=status.phase,
                retry_count=status.retry_count,
                unplaced=unplaced,
                message=(
                    f"Volcano job {status.namespace}/{status.name} did not have every rank "
                    f"placed and running within pending_timeout={target.pending_timeout:g}s "
                    f"(phase {status.phase or 'none'}"
                    + (f"; ranks started: {missing}" if missing else "")
                    + ")"
                ),
            )
    if target.deadline is not None and now >= target.deadline:
        return timed_out(target, status)
    return None


def timed_out(target: WaitTarget, status: JobStatus | None = None) -> WaitResult:
    """The result for Airflow's ``execution_timeout`` running out."""
    return WaitResult(
        outcome=Outcome.TIMEOUT,
        name=target.name,
        namespace=target.namespace,
        uid=(status.uid if status else "") or target.uid or "",
        phase=status.phase if status else "",
        message=(
            f"Gave up waiting on Volcano job {target.namespace}/{target.name}: "
            "execution_timeout reached"
        ),
    )


def gang_is_whole(job: Mapping[str, Any] | None) -> bool:
    """Whether every rank of the job is placed and running right now."""
    if job is None:
        return False
    status = interpret(job)
    return status.phase == "Running" and not unplaced_ranks(status)


def _with_uid(result: WaitResult, uid: str) -> WaitResult:
    # A deleted job has no uid of its own any more; the result still names the one waited on.
    if result.uid:
        return result
    return dataclasses.replace(result, uid=uid)

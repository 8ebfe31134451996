"""What a Volcano Job's status means for the Airflow task waiting on it.

Pure: takes the job as the plain dict the API returns (or ``None`` when the job is gone) and
says whether to keep waiting, and if not, whether it succeeded and why. The trigger, the
sensor and the operator's sync wait all read jobs through this one module, so they can never
disagree about what a phase means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from airflow_volcano_wandb.job.job_view import JobView


class Verdict(str, Enum):
    """How a wait on a job ends, or that it goes on."""

    WAIT = "wait"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    DELETED = "deleted"


# Volcano's JobPhase values (volcano.sh/apis batch/v1alpha1). Completing, Aborting, Terminating
# and Restarting are transient: Volcano moves on from them by itself, so they mean "wait".
SUCCESS_PHASES = frozenset({"Completed"})
FAILURE_PHASES = frozenset({"Failed", "Terminated", "Aborted"})
WAIT_PHASES = frozenset(
    {"", "Pending", "Running", "Restarting", "Completing", "Aborting", "Terminating"}
)


@dataclass(frozen=True)
class JobStatus:
    """A job's status, reduced to what a waiter needs."""

    name: str
    namespace: str
    uid: str
    phase: str
    verdict: Verdict
    reason: str = ""
    message: str = ""
    retry_count: int = 0
    transition_time: str | None = None
    replicas: Mapping[str, int] = field(default_factory=dict)
    pods_by_task: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.verdict is not Verdict.WAIT

    def progress(self) -> str:
        """One line for the task log, e.g. ``Running: master 1/1, worker 2/3 (retry 1)``.

        A task counts ``x/n`` as pods running or done out of its replicas.
        """
        parts = []
        for task, replicas in self.replicas.items():
            counts = self.pods_by_task.get(task, {})
            started = sum(counts.get(phase, 0) for phase in ("Running", "Succeeded"))
            failed = counts.get("Failed", 0)
            part = f"{task} {started}/{replicas}"
            if failed:
                part += f" ({failed} failed)"
            parts.append(part)
        line = f"{self.phase or 'Submitted'}: {', '.join(parts) if parts else 'no tasks'}"
        if self.retry_count:
            line += f" (retry {self.retry_count})"
        return line

    def explain(self) -> str:
        """The job's end in one sentence: phase, then Volcano's own reason and message."""
        if self.verdict is Verdict.DELETED:
            return (
                f"Volcano job {self.namespace}/{self.name} was deleted while it was being "
                "waited on (by someone or something other than this task)"
            )
        text = f"Volcano job {self.namespace}/{self.name} {self.phase or 'has no phase'}"
        cause = ": ".join(part for part in (self.reason, self.message) if part)
        if cause:
            text += f" ({cause})"
        if self.retry_count:
            text += f" after {self.retry_count} restart(s)"
        return text


def job_ref(job: Mapping[str, Any]) -> dict[str, str]:
    """One submission of a job, as every part of the provider names it (and XCom shows it)."""
    meta = job["metadata"]
    return {"name": meta["name"], "namespace": meta["namespace"], "uid": meta["uid"]}


def interpret(job: Mapping[str, Any] | None, *, name: str = "", namespace: str = "") -> JobStatus:
    """Read a Volcano Job dict; ``None`` means the job no longer exists."""
    if job is None:
        return JobStatus(name=name, namespace=namespace, uid="", phase="", verdict=Verdict.DELETED)
    view = JobView.of(job)
    # Foreground deletion keeps the job until its pods are gone, often for their whole grace
    # period; a job being deleted will not finish its run, so the wait ends now.
    deleting = bool(view.deletion_timestamp)
    return JobStatus(
        name=view.name or name,
        namespace=view.namespace or namespace,
        uid=view.uid,
        phase=view.phase,
        verdict=Verdict.DELETED if deleting else _verdict_for(view.phase),
        reason=view.reason,
        message=view.message,
        retry_count=view.retry_count,
        transition_time=view.transition_time,
        replicas=view.replicas,
        pods_by_task=view.pods_by_task,
    )


def _verdict_for(phase: str) -> Verdict:
    if phase in SUCCESS_PHASES:
        return Verdict.SUCCEEDED
    if phase in FAILURE_PHASES:
        return Verdict.FAILED
    # A phase this version does not know yet is not an end: waiting is the safe reading, and
    # the pending timeout or Airflow's execution_timeout still bounds the wait.
    return Verdict.WAIT

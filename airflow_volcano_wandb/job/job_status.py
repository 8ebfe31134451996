"""What a Volcano Job's status means for the Airflow task waiting on it.

Pure: takes the job as the plain dict the API returns (or ``None`` when the job is gone) and
says whether to keep waiting, and if not, how it ended (``endings``: a phase is a lookup into
that table). The trigger, the sensor and the operator's sync wait all read jobs through this
one module, so they can never disagree about what a phase means.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.job.endings import Ending, of_phase
from airflow_volcano_wandb.job.job_view import JobView


@dataclass(frozen=True)
class JobStatus:
    """A job's status, reduced to what a waiter needs."""

    name: str
    namespace: str
    uid: str
    phase: str
    #: How the job ended (``SUCCEEDED``, ``FAILED`` or ``DELETED``); ``None``: wait on.
    ending: Ending | None
    reason: str = ""
    message: str = ""
    retry_count: int = 0
    transition_time: str | None = None
    replicas: Mapping[str, int] = field(default_factory=dict)
    pods_by_task: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    #: The pods each task needs running (``JobView.needed``): its replicas, or an elastic
    #: job's ``minAvailable``; a task left out needs all its replicas.
    needed: Mapping[str, int] = field(default_factory=dict)

    @property
    def terminal(self) -> bool:
        return self.ending is not None

    def progress(self) -> str:
        """One line for the task log, e.g. ``Running: master 1/1, worker 2/3 (retry 1)``.

        A task counts ``x/n`` as pods running or done out of its replicas; an elastic task
        says how many it needs (``worker 2/3, at least 1``).
        """
        parts = []
        for task, replicas in self.replicas.items():
            counts = self.pods_by_task.get(task, {})
            started = sum(counts.get(phase, 0) for phase in ("Running", "Succeeded"))
            failed = counts.get("Failed", 0)
            part = f"{task} {started}/{replicas}"
            if self.needed.get(task, replicas) < replicas:
                part += f", at least {self.needed[task]}"
            if failed:
                part += f" ({failed} failed)"
            parts.append(part)
        line = f"{self.phase or 'Submitted'}: {', '.join(parts) if parts else 'no tasks'}"
        if self.retry_count:
            line += f" (retry {self.retry_count})"
        return line

    def explain(self) -> str:
        """The job's end in one sentence: phase, then Volcano's own reason and message."""
        if self.ending is Ending.DELETED:
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
        return JobStatus(name=name, namespace=namespace, uid="", phase="", ending=Ending.DELETED)
    view = JobView.of(job)
    # Foreground deletion keeps the job until its pods are gone, often for their whole grace
    # period; a job being deleted will not finish its run, so the wait ends now.
    deleting = bool(view.deletion_timestamp)
    return JobStatus(
        name=view.name or name,
        namespace=view.namespace or namespace,
        uid=view.uid,
        phase=view.phase,
        ending=Ending.DELETED if deleting else of_phase(view.phase),
        reason=view.reason,
        message=view.message,
        retry_count=view.retry_count,
        transition_time=view.transition_time,
        replicas=view.replicas,
        pods_by_task=view.pods_by_task,
        needed=view.needed,
    )

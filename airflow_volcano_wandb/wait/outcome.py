"""How a wait on a Volcano job ends: one vocabulary for the trigger, the operator and the sensor.

Pure. ``job_status.Verdict`` says what a job's own status means (wait, succeeded, failed,
deleted); an :class:`Outcome` says why a *wait* ended, which also covers endings the job's
status cannot tell: a pending timeout, Airflow's execution timeout, a watch that stayed down.
A :class:`WaitResult` is the one serialisable record of that ending; it crosses the
triggerer-to-worker boundary as a trigger event and is validated when it comes back. Each
outcome's sentence, the message a failed task shows, is made here by its own constructor;
``failure_exception.ENDINGS`` says which exception each outcome raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from airflow_volcano_wandb.job.job_status import JobStatus, Verdict
from airflow_volcano_wandb.wait.restart_budget import CrashLoop
from airflow_volcano_wandb.wait.stall import Stall
from airflow_volcano_wandb.wait.startup import StartFailure
from airflow_volcano_wandb.wait.wandb_stop import describe as describe_stop
from airflow_volcano_wandb.wait.wandb_stop import describe_unheeded


class Outcome(str, Enum):
    """Why a wait on a job ended: the job's own end as its status tells it (the first three,
    ``job_status.Verdict``'s values, so a verdict is an outcome), or an ending it cannot tell."""

    SUCCEEDED = Verdict.SUCCEEDED.value
    #: Volcano ended the job badly: ``Failed``, ``Terminated`` or ``Aborted``.
    FAILED = Verdict.FAILED.value
    #: The job was deleted (or replaced) by someone else while it was waited on.
    DELETED = Verdict.DELETED.value
    #: Not every rank was placed and running within ``pending_timeout``.
    PENDING_TIMEOUT = "pending_timeout"
    #: Airflow's ``execution_timeout`` was reached.
    TIMEOUT = "timeout"
    #: The job's containers restarted in place more often than ``max_container_restarts``
    #: (``restart_budget``); the job itself still ran, restarting a trainer that kept failing.
    CRASH_LOOP = "crash_loop"
    #: A rank's trainer exited with the code that says its W&B run was stopped from the W&B UI
    #: or API (``wandb_stop``); the job still ran (restarting it in place) or Volcano ended it.
    #: Or W&B said the run was stopped and the job still ran ``wandb_stop_grace`` later.
    STOPPED_FROM_WANDB = "stopped_from_wandb"
    #: The job ran, but its master printed nothing for ``stall_timeout`` (``stall``): a hung
    #: collective or a deadlocked trainer holds its GPUs without training.
    STALLED = "stalled"
    #: A placed rank's container cannot start (``startup``): its image cannot be pulled or is
    #: no image reference, or a Secret or ConfigMap (key) it needs is missing; at once where
    #: the kubelet cannot heal it, after ``startup_timeout`` where it might.
    START_FAILED = "start_failed"
    #: The API could not be listed or watched for longer than the grace; the job's state is
    #: unknown, so it is never deleted for this.
    WATCH_LOST = "watch_lost"

    @property
    def succeeded(self) -> bool:
        return self is Outcome.SUCCEEDED

    @property
    def job_state_known(self) -> bool:
        """Whether the ending was read from the job itself (confirmed by the apiserver)."""
        return self is not Outcome.WATCH_LOST

    @property
    def confirmed_on_a_fresh_read(self) -> bool:
        """Whether this verdict, judged on a cached copy, is judged again on a fresh read first:
        it ends in a deletion or a failed task, and a watch outage may have hidden the job's
        real end. (The pods' and the silence's verdicts are always confirmed, by ``step_io``.)"""
        return self in (Outcome.FAILED, Outcome.DELETED, Outcome.PENDING_TIMEOUT, Outcome.TIMEOUT)


class WaitResultError(ValueError):
    """A trigger event that is not a wait result of this provider."""


@dataclass(frozen=True)
class WaitResult:
    """The end of one wait: what happened to which job, in one sentence."""

    outcome: Outcome
    name: str
    namespace: str
    uid: str
    message: str
    phase: str = ""
    retry_count: int = 0
    #: Tasks with ranks not placed and running, e.g. ``{"worker": "0/2"}`` (pending timeout).
    unplaced: Mapping[str, str] = field(default_factory=dict)
    #: The container that took the restarts past the budget (``Outcome.CRASH_LOOP`` only).
    crash_loop: CrashLoop | None = None
    #: The master container that went silent (``Outcome.STALLED`` only).
    stall: Stall | None = None
    #: The container that cannot start (``Outcome.START_FAILED`` only).
    start_failure: StartFailure | None = None

    @classmethod
    def from_status(
        cls, status: JobStatus, outcome: Outcome | None = None, message: str | None = None
    ) -> WaitResult:
        """The result for a job read through ``job_status``; its verdict unless told otherwise."""
        if outcome is None:
            if not status.terminal:
                raise ValueError(f"job {status.name} is still waiting; it has no outcome")
            outcome = Outcome(status.verdict.value)
        return cls(
            outcome=outcome,
            name=status.name,
            namespace=status.namespace,
            uid=status.uid,
            message=message or status.explain(),
            phase=status.phase,
            retry_count=status.retry_count,
        )

    @classmethod
    def _of_running(
        cls, status: JobStatus, outcome: Outcome, message: str, **fields: Any
    ) -> WaitResult:
        """The wait's end with ``outcome``, for a job that is still there as ``status`` shows."""
        seen = {
            "name": status.name,
            "namespace": status.namespace,
            "uid": status.uid,
            "phase": status.phase,
            "retry_count": status.retry_count,
        }
        return cls(outcome=outcome, message=message, **{**seen, **fields})

    @classmethod
    def stopped_from_wandb(cls, status: JobStatus, rank: str) -> WaitResult:
        """``rank``'s trainer exited with the stop code of a W&B run stopped from W&B."""
        message = describe_stop(status.namespace, status.name, rank)
        return cls._of_running(status, Outcome.STOPPED_FROM_WANDB, message)

    @classmethod
    def stop_unheeded(cls, status: JobStatus, run_id: str, grace: float) -> WaitResult:
        """W&B run ``run_id`` was stopped, and the job still ran ``grace`` seconds later."""
        message = describe_unheeded(status.namespace, status.name, run_id, grace)
        return cls._of_running(status, Outcome.STOPPED_FROM_WANDB, message)

    @classmethod
    def crash_looping(cls, status: JobStatus, loop: CrashLoop) -> WaitResult:
        """The job's containers restarted past its budget; ``loop`` names the container."""
        message = f"Volcano job {status.namespace}/{status.name} is crash-looping: "
        message += loop.describe()
        return cls._of_running(status, Outcome.CRASH_LOOP, message, crash_loop=loop)

    @classmethod
    def not_placed(
        cls, status: JobStatus, pending_timeout: float, unplaced: Mapping[str, str]
    ) -> WaitResult:
        """The gang was not wholly placed and running within ``pending_timeout`` seconds."""
        missing = ", ".join(f"{task} {count}" for task, count in unplaced.items())
        message = (
            f"Volcano job {status.namespace}/{status.name} did not have every rank "
            f"placed and running within pending_timeout={pending_timeout:g}s "
            f"(phase {status.phase or 'none'}"
            + (f"; ranks started: {missing}" if missing else "")
            + ")"
        )
        return cls._of_running(status, Outcome.PENDING_TIMEOUT, message, unplaced=unplaced)

    @classmethod
    def timed_out(cls, status: JobStatus, name: str, namespace: str, uid: str) -> WaitResult:
        """Airflow's ``execution_timeout`` was reached while job ``namespace/name`` ran."""
        message = f"Gave up waiting on Volcano job {namespace}/{name}: execution_timeout reached"
        return cls._of_running(status, Outcome.TIMEOUT, message, uid=uid, retry_count=0)

    @classmethod
    def stalled(cls, status: JobStatus, stall: Stall) -> WaitResult:
        """The job's master printed nothing for its ``stall_timeout`` (``stall`` says where)."""
        message = f"Volcano job {status.namespace}/{status.name} has stalled: {stall.describe()}"
        return cls._of_running(status, Outcome.STALLED, message, stall=stall)

    @classmethod
    def could_not_start(cls, status: JobStatus, failure: StartFailure) -> WaitResult:
        """A placed rank's container cannot start; ``failure`` names it, its image and why."""
        message = f"Volcano job {status.namespace}/{status.name} cannot start: "
        message += failure.describe()
        return cls._of_running(status, Outcome.START_FAILED, message, start_failure=failure)

    @classmethod
    def watch_lost(cls, name: str, namespace: str, uid: str, why: str) -> WaitResult:
        """Neither the watch nor a direct read reached the API for the grace: state unknown."""
        message = (
            f"Lost the watch on Volcano job {namespace}/{name}: {why}. The "
            "job was left untouched; the next try reattaches to it."
        )
        return cls(Outcome.WATCH_LOST, name=name, namespace=namespace, uid=uid, message=message)

    def to_event(self) -> dict[str, Any]:
        """The JSON-safe payload of a trigger event."""
        event = asdict(self)
        event["outcome"] = self.outcome.value
        event["unplaced"] = dict(self.unplaced)
        event["crash_loop"] = self.crash_loop.to_dict() if self.crash_loop else None
        event["stall"] = self.stall.to_dict() if self.stall else None
        event["start_failure"] = self.start_failure.to_dict() if self.start_failure else None
        return event

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> WaitResult:
        """Read a trigger event back, refusing anything that is not one of ours."""
        if not isinstance(event, Mapping):
            raise WaitResultError(f"a wait result must be a mapping, not {type(event).__name__}")
        try:
            outcome = Outcome(event["outcome"])
            result = cls(
                outcome=outcome,
                name=str(event["name"]),
                namespace=str(event["namespace"]),
                uid=str(event.get("uid") or ""),
                message=str(event["message"]),
                phase=str(event.get("phase") or ""),
                retry_count=int(event.get("retry_count") or 0),
                unplaced={str(k): str(v) for k, v in (event.get("unplaced") or {}).items()},
                crash_loop=(
                    CrashLoop.from_dict(event["crash_loop"]) if event.get("crash_loop") else None
                ),
                stall=Stall.from_dict(event["stall"]) if event.get("stall") else None,
                start_failure=(
                    StartFailure.from_dict(event["start_failure"])
                    if event.get("start_failure")
                    else None
                ),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise WaitResultError(f"not a Volcano wait result: {dict(event)!r} ({exc})") from exc
        return result

    def job_ref(self) -> dict[str, str]:
        """The job this result is about, as the ``volcano_job`` XCom shows it."""
        return {"name": self.name, "namespace": self.namespace, "uid": self.uid}

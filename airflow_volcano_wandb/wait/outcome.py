"""The record of how a wait on a Volcano job ended, for the trigger, the operator and the sensor.

Pure. Its ``outcome`` is one of ``job.endings``: the job's own end, or one its status cannot
tell (a pending timeout, the execution timeout, a watch that stayed down). A :class:`WaitResult`
crosses the triggerer-to-worker boundary as a trigger event and is validated when it comes
back; each ending's sentence is made by its own constructor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import JobStatus
from airflow_volcano_wandb.wait.restart_budget import CrashLoop
from airflow_volcano_wandb.wait.stall import Stall
from airflow_volcano_wandb.wait.startup import StartFailure
from airflow_volcano_wandb.wait.wandb_stop import describe as describe_stop
from airflow_volcano_wandb.wait.wandb_stop import describe_unheeded

#: The verdicts' records a result may carry (its fields of the same names, snake-cased).
_Record = TypeVar("_Record", CrashLoop, Stall, StartFailure)


def _read(record: type[_Record], data: Any) -> _Record | None:
    """The verdict's ``record`` of an event's field (``None``: it carries none)."""
    return record.from_dict(data) if data else None


#: The keys that events of earlier builds named the job by: a deferred task resumes across builds.
_EARLIER_KEYS = {"name": "job_name", "uid": "job_uid"}


class ForeignEvent(ValueError):
    """A trigger event that is not a wait result of this provider."""


@dataclass(frozen=True)
class WaitResult:
    """The end of one wait: what happened to which job, in one sentence."""

    outcome: Ending
    job_name: str
    namespace: str
    job_uid: str
    message: str
    phase: str = ""
    retry_count: int = 0
    #: Tasks with ranks not placed and running, e.g. ``{"worker": "0/2"}`` (pending timeout).
    unplaced: Mapping[str, str] = field(default_factory=dict)
    #: The container that took the restarts past the budget (``CRASH_LOOP`` only).
    crash_loop: CrashLoop | None = None
    #: The master container that went silent (``STALLED`` only).
    stall: Stall | None = None
    #: The container that cannot start (``START_FAILED`` only).
    start_failure: StartFailure | None = None
    #: The master log's records' metrics, sampled (``training_progress.keep_metrics``):
    #: ``{"train/epoch_loss": [[step, value], ...]}``; empty unless the wait followed the log.
    metrics: Mapping[str, list[list[float]]] = field(default_factory=dict)

    @classmethod
    def from_status(
        cls, status: JobStatus, outcome: Ending | None = None, message: str | None = None
    ) -> WaitResult:
        """The result for a job read through ``job_status``; its ending unless told otherwise."""
        outcome = outcome or status.ending
        if outcome is None:
            raise ValueError(f"job {status.name} is still waiting; it has no outcome")
        return cls(
            outcome=outcome,
            job_name=status.name,
            namespace=status.namespace,
            job_uid=status.uid,
            message=message or status.explain(),
            phase=status.phase,
            retry_count=status.retry_count,
        )

    @classmethod
    def _of_running(
        cls, status: JobStatus, outcome: Ending, message: str, **fields: Any
    ) -> WaitResult:
        """The wait's end with ``outcome``, for a job that is still there as ``status`` shows."""
        return dataclasses.replace(cls.from_status(status, outcome, message), **fields)

    @classmethod
    def _of_record(cls, status: JobStatus, outcome: Ending, what: str, **record: Any) -> WaitResult:
        """The end of a job still there, ``what`` its ``record`` (a ``_Record``) says."""
        (named,) = record.values()
        message = f"Volcano job {status.namespace}/{status.name} {what}: {named.describe()}"
        return cls._of_running(status, outcome, message, **record)

    @classmethod
    def stopped_from_wandb(cls, status: JobStatus, rank: str) -> WaitResult:
        """``rank``'s trainer exited with the stop code of a W&B run stopped from W&B."""
        message = describe_stop(status.namespace, status.name, rank)
        return cls._of_running(status, Ending.STOPPED_FROM_WANDB, message)

    @classmethod
    def stop_unheeded(cls, status: JobStatus, run_id: str, grace: float) -> WaitResult:
        """W&B run ``run_id`` was stopped, and the job still ran ``grace`` seconds later."""
        message = describe_unheeded(status.namespace, status.name, run_id, grace)
        return cls._of_running(status, Ending.STOPPED_FROM_WANDB, message)

    @classmethod
    def crash_looping(cls, status: JobStatus, loop: CrashLoop) -> WaitResult:
        """The job's containers restarted past its budget; ``loop`` names the container."""
        return cls._of_record(status, Ending.CRASH_LOOP, "is crash-looping", crash_loop=loop)

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
        return cls._of_running(status, Ending.PENDING_TIMEOUT, message, unplaced=unplaced)

    @classmethod
    def timed_out(cls, status: JobStatus, name: str, namespace: str, uid: str) -> WaitResult:
        """Airflow's ``execution_timeout`` was reached while job ``namespace/name`` ran."""
        message = f"Gave up waiting on Volcano job {namespace}/{name}: execution_timeout reached"
        return cls._of_running(status, Ending.TIMEOUT, message, job_uid=uid, retry_count=0)

    @classmethod
    def stalled(cls, status: JobStatus, stall: Stall) -> WaitResult:
        """The job's master printed nothing for its ``stall_timeout`` (``stall`` says where)."""
        return cls._of_record(status, Ending.STALLED, "has stalled", stall=stall)

    @classmethod
    def could_not_start(cls, status: JobStatus, failure: StartFailure) -> WaitResult:
        """A placed rank's container cannot start; ``failure`` names it, its image and why."""
        return cls._of_record(status, Ending.START_FAILED, "cannot start", start_failure=failure)

    @classmethod
    def watch_lost(cls, name: str, namespace: str, uid: str, why: str) -> WaitResult:
        """Neither the watch nor a direct read reached the API for the grace: state unknown."""
        message = (
            f"Lost the watch on Volcano job {namespace}/{name}: {why}. The "
            "job was left untouched; the next try reattaches to it."
        )
        return cls(
            Ending.WATCH_LOST, job_name=name, namespace=namespace, job_uid=uid, message=message
        )

    def to_event(self) -> dict[str, Any]:
        """The JSON-safe payload of a trigger event."""
        event = asdict(self)
        event["outcome"] = self.outcome.value
        event["unplaced"] = dict(self.unplaced)  # asdict: the records are dicts too
        event["metrics"] = {k: [list(p) for p in v] for k, v in self.metrics.items()}
        return event

    @classmethod
    def from_event(cls, event: Mapping[str, Any]) -> WaitResult:
        """Read a trigger event back, refusing anything that is not one of ours."""
        if not isinstance(event, Mapping):
            raise ForeignEvent(f"a wait result must be a mapping, not {type(event).__name__}")
        event = {_EARLIER_KEYS.get(key, key): value for key, value in event.items()}
        try:
            return cls(
                outcome=Ending(event["outcome"]),
                job_name=str(event["job_name"]),
                namespace=str(event["namespace"]),
                job_uid=str(event.get("job_uid") or ""),
                message=str(event["message"]),
                phase=str(event.get("phase") or ""),
                retry_count=int(event.get("retry_count") or 0),
                unplaced={str(k): str(v) for k, v in (event.get("unplaced") or {}).items()},
                crash_loop=_read(CrashLoop, event.get("crash_loop")),
                stall=_read(Stall, event.get("stall")),
                start_failure=_read(StartFailure, event.get("start_failure")),
                metrics={
                    str(k): [[int(s), float(v)] for s, v in points]
                    for k, points in (event.get("metrics") or {}).items()
                },
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ForeignEvent(f"not a Volcano wait result: {dict(event)!r} ({exc})") from exc

    def job_ref(self) -> dict[str, str]:
        """The job this result is about, as the ``volcano_job`` XCom shows it."""
        return {"name": self.job_name, "namespace": self.namespace, "uid": self.job_uid}

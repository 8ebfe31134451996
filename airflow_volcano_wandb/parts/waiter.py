"""The wait on one Volcano job, the operator's and the sensor's alike: one :class:`Waiter`,
held by each shell, which keeps only what differs (the operator submits, the sensor pokes).
It describes the wait once (a ``WaitSpec``, whole to the trigger and back), waits in the
task's process when it must, turns the result into the task's outcome in the ordered steps of
:data:`FINISH_STEPS` and deletes the job when a kill or the cleanup rule says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import KW_ONLY, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk import Context

from airflow_volcano_wandb.airflow_compat import AirflowTaskTimeout, task_state_store
from airflow_volcano_wandb.job import deletion
from airflow_volcano_wandb.job.job_facts import JobFacts
from airflow_volcano_wandb.job.job_status import job_ref
from airflow_volcano_wandb.job.job_view import ObjectMeta
from airflow_volcano_wandb.job.ownership import wandb_run_of
from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.finish import FINISH_STEPS, Finishing
from airflow_volcano_wandb.parts.job_wait import JobWait
from airflow_volcano_wandb.parts.limits import RunLimits
from airflow_volcano_wandb.parts.log_follow import LogFollow
from airflow_volcano_wandb.parts.resumption import ResumePolicy
from airflow_volcano_wandb.parts.wandb_report import WandbReport
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
from airflow_volcano_wandb.triggers.wait_spec import WaitSpec
from airflow_volcano_wandb.wait import job_report
from airflow_volcano_wandb.wait.outcome import WaitResult

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook
    from airflow_volcano_wandb.hooks.wandb import WandbHook


class HoldingTask(Protocol):
    """What a waiter reads of the operator or sensor that holds it."""

    @property
    def hook(self) -> VolcanoHook: ...
    @property
    def log(self) -> Any: ...  # Airflow's task logger (the SDK's Logger protocol)
    @property
    def outlets(self) -> Any: ...


class TaskParts(Protocol):
    """The parts of the holding task a waiter reads (``OperatorParts`` and ``SensorParts``
    have them all)."""

    @property
    def wait(self) -> JobWait: ...
    @property
    def connection(self) -> Connection: ...
    @property
    def report(self) -> WandbReport: ...
    @property
    def logs(self) -> LogFollow: ...
    @property
    def limits(self) -> RunLimits: ...


@dataclass(eq=False)
class Waiter:
    """The wait on one job that the operator and the sensor each hold, from its trigger to
    the task's outcome."""

    task: HoldingTask
    parts: TaskParts
    _: KW_ONLY
    #: The try that waits (``None``: a sensor's, which adopts no job).
    try_number: int | None = None
    #: The operator's ``ResumePolicy``.
    resume: ResumePolicy | None = None
    delete_on_kill: bool = True
    #: The W&B run the job writes to, if not the one it names.
    wandb_run_id: str | None = None
    #: What a timeout raises instead of ``JobTimeoutError`` (the sensor's, never retried).
    timeout_error: type[Exception] | None = None
    #: The submission waited on, as soon as it is known (for a kill).
    job: dict[str, str] | None = field(default=None, init=False)
    #: What the try ran and trained into, once it ended (the operator's OpenLineage).
    facts: JobFacts | None = field(default=None, init=False)
    run: dict[str, Any] = field(default_factory=dict, init=False)
    summary: dict[str, Any] | None = field(default=None, init=False)

    @cached_property
    def wandb_hook(self) -> WandbHook:
        return self.parts.report.hook()

    def set_job(self, job: dict[str, str]) -> None:
        """The job waited on, from the moment it exists."""
        self.job = job

    def pin(self, job: Mapping[str, Any] | None, uid: str | None) -> None:
        """Wait on ``job``, as read, unless a job is pinned already or ``job`` is not the
        submission ``uid``: so a job recreated under its name is not it."""
        if job is not None and self.job is None and (not uid or ObjectMeta.of(job).uid == uid):
            self.job = job_ref(job)

    def run_id(self, job: Mapping[str, Any] | None) -> str | None:
        """The W&B run the job writes to: ``wandb_run_id``, else the one the job names."""
        return self.wandb_run_id or (wandb_run_of(job) if job else None)

    def wait(
        self, job: Mapping[str, Any], *, deferred: bool, **how: Any
    ) -> WaitResult | VolcanoJobTrigger:
        """The wait on ``job`` (its name, namespace and uid) as :meth:`spec` says ``how``:
        its result, waited for here, or, ``deferred``, the trigger to defer to once the job
        still runs after ``defer_after`` seconds waited for here (without the master's log,
        which the triggerer may follow)."""
        how.setdefault("waiting_since", time.time())  # one startup budget for the try
        if not deferred:
            return self.wait_here(self.trigger(job, deferred=False, **how))
        if (window := self.parts.wait.defer_after) > 0:
            first = self.trigger(job, deferred=False, follow=False, **how)
            if (ended := self.wait_here(first, within=window)) is not None:
                return ended
            self.task.log.info(
                "Volcano job %s/%s still runs after %gs: deferring to the triggerer",
                job["namespace"],
                job["name"],
                window,
            )
        return self.trigger(job, deferred=True, **how)

    def spec(
        self,
        job: Mapping[str, Any],
        *,
        deferred: bool,
        deadline: float | None,
        poll_interval: float,
        run_id: str | None,
        waiting_since: float | None = None,
        follow: bool | None = None,
    ) -> WaitSpec:
        """The wait on ``job``, ``deferred`` or in the task's process (which follows the
        master's log unless ``follow`` says otherwise), asking W&B run ``run_id``: the one
        description of a wait, built here for the operator and the sensor alike."""
        parts = self.parts
        if follow is None:
            follow = parts.logs.follow_master_log or not deferred
        masked = [self.wandb_hook.mask_api_key()] if follow else []
        return WaitSpec(
            job_name=job["name"],
            namespace=job["namespace"],
            job_uid=job.get("uid") or None,
            **parts.connection.kwargs(),
            pending_timeout=parts.wait.pending_seconds(),
            deadline=deadline,
            poll_interval=poll_interval,
            delete_on_kill=self.delete_on_kill,
            watch_failure_grace=parts.wait.watch_failure_grace,
            try_number=self.try_number,
            **parts.logs.trigger_kwargs(masked, follow=follow),
            deferred_at=time.time() if deferred else None,
            waiting_since=waiting_since or time.time(),
            **parts.limits.trigger_kwargs(),
            **parts.report.progress_kwargs(run_id, parts.limits.asks_wandb, self.wandb_hook),
        )

    def trigger(self, job: Mapping[str, Any], **how: Any) -> VolcanoJobTrigger:
        """The trigger of the wait :meth:`spec` describes."""
        return VolcanoJobTrigger(**self.spec(job, **how).to_kwargs())

    def wait_here(self, trigger: VolcanoJobTrigger, within: float | None = None) -> Any:
        """The same wait the triggerer would run, in this process, logging to the task log
        (for ``within`` seconds at most: ``None`` when the job still runs then). Any failure
        meanwhile is raised and leaves the job to the next try: a user's kill deletes it
        through ``on_kill``, which Airflow calls first; nothing else here is a kill confirmed
        with Airflow (a task runner whose Celery worker was SIGKILLed fails on its supervisor's
        closed channel, and its next try reattaches)."""
        trigger._log = self.task.log
        try:
            event = asyncio.run(_first_event(trigger, within))
            return None if event is None else WaitResult.from_event(event)
        except AirflowTaskTimeout:  # execution_timeout, armed at the task's start
            if (ended := self.out_of_time()) is None:
                raise
            return ended

    @contextlib.contextmanager
    def master_log_followed(self, spec: WaitSpec) -> Iterator[None]:
        """The master's log of the job of ``spec``, followed by a thread of this process
        (a sensor's pokes, which run no trigger), masked as the trigger masks it."""
        # The async follow's imports (the asyncio Kubernetes client) only when it runs.
        from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
        from airflow_volcano_wandb.logs.master_log import MasterLogThread
        from airflow_volcano_wandb.logs.secret_digest import SecretDigest

        connection = spec.connection_kwargs()
        follower = MasterLogThread(
            lambda: AsyncVolcanoHook(**connection),
            spec.job_name,
            spec.namespace,
            self.task.log,
            spec.master_log_max_lines,
            spec.master_log_max_bytes,
            [SecretDigest.from_json(digest) for digest in spec.masked_secrets],
            progress=spec.wandb_run() is None,  # the log's records, unless W&B's run tells
        )
        follower.start()
        try:
            yield
        finally:
            follower.stop()

    def out_of_time(self) -> WaitResult | None:
        """The wait ran out of time: the job's own end when the apiserver shows one now (it
        ended unseen, say during a watch outage); else ``None``, and the job is deleted."""
        ended = self.job and job_report.ended_meanwhile(self.task.hook, self.job, self.task.log)
        if not ended:
            self.delete()
        return ended or None

    def finish(
        self,
        result: WaitResult,
        context: Context,
        run: Mapping[str, Any] | None = None,
        resumed: bool = False,
    ) -> dict[str, Any]:
        """Clean up as ``on_finish_action`` says, tell what happened (XComs, the W&B run
        ``run``, by default the one the job names, the outlets' asset events) and succeed with
        the job's reference, or raise the failure's exception (its class names the cause):
        the steps of :data:`FINISH_STEPS`, in their order. ``resumed``: from the trigger."""
        finishing = Finishing(self, result, context, None if run is None else dict(run), resumed)
        for step in FINISH_STEPS:
            step(finishing)
        summary = {} if finishing.summary is None else {"wandb_summary": finishing.summary}
        return {**result.job_ref(), **self.run, **summary, "phase": result.phase}

    def ended(self, context: Context, result: WaitResult, run: Mapping, error: Any) -> None:
        """The wait ended (``error``: what the task fails with): tell the next try (the cause,
        for ``resume_on``) and the W&B run (the link back)."""
        if self.resume is not None:
            self.resume.record_cause(task_state_store(context), result.job_uid, error)
        if run:
            outcome = "success" if error is None else result.outcome.value
            self.parts.report.link_back(context, run, outcome)

    def delete(self, *, kill: bool = False) -> None:
        """Delete the job unless a newer try adopted it (for a ``kill``: unless it has ended,
        or ``delete_on_kill`` is off); log, never raise."""
        if self.job and (self.delete_on_kill or not kill):
            hook, log = self.task.hook, self.task.log
            deletion.delete_if_owned(hook, self.job, self.try_number, log, kill=kill)


async def _first_event(trigger: VolcanoJobTrigger, within: float | None) -> dict | None:
    """The trigger's event; ``None`` once ``within`` seconds passed without one (the wait is
    then cancelled: its watches released, its follow stopped)."""

    async def first() -> dict[str, Any]:
        async for event in trigger.run():
            return event.payload
        raise RuntimeError(f"the wait on {trigger.namespace}/{trigger.job_name} ended, no event")

    waiting = asyncio.ensure_future(first())
    done, _ = await asyncio.wait({waiting}, timeout=within)
    if done:
        return waiting.result()
    waiting.cancel()
    await asyncio.gather(waiting, return_exceptions=True)
    return None

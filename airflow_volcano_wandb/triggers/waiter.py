"""The wait on one Volcano job, the operator's and the sensor's alike: one :class:`Waiter`,
held by each shell, which keeps only what differs (the operator submits, the sensor pokes).
It builds the trigger, waits in the task's process when it must, turns the result into the
task's outcome and deletes the job when a kill or the cleanup rule says so, reading the
shell's parts (``parts/job_wait.py``'s ``JobWait`` among them) by name.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from functools import cached_property
from typing import TYPE_CHECKING, Any, Protocol

from airflow.sdk import Asset

from airflow_volcano_wandb.airflow_compat import AirflowTaskTimeout, task_state_store
from airflow_volcano_wandb.job import deletion
from airflow_volcano_wandb.job.job_facts import JobFacts, asset_extra
from airflow_volcano_wandb.job.ownership import wandb_run_of
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
from airflow_volcano_wandb.wait import cleanup, job_report
from airflow_volcano_wandb.wait.outcome import WaitResult

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook
    from airflow_volcano_wandb.hooks.wandb import WandbHook


class Shell(Protocol):
    """What a waiter reads of the task that holds it (its parts: ``OperatorParts`` or
    ``SensorParts``, each with ``wait``, ``connection``, ``report``, ``logs``, ``limits``)."""

    hook: VolcanoHook
    log: Any
    outlets: Any


class Waiter:
    """The wait on the job of ``shell``'s try ``try_number`` (``None``: a sensor's, which
    adopts no job); ``resume``: the operator's ``ResumePolicy``; ``wandb_run_id``: the run the
    job writes to, if not the one it names."""

    def __init__(
        self,
        shell: Shell,
        parts: Any,
        *,
        try_number: int | None = None,
        resume: Any = None,
        delete_on_kill: bool = True,
        wandb_run_id: str | None = None,
    ) -> None:
        self.shell, self.parts, self.options = shell, parts, parts.wait
        self.try_number, self.resume = try_number, resume
        self.delete_on_kill, self.wandb_run_id = delete_on_kill, wandb_run_id
        #: The submission waited on, as soon as it is known (for a kill).
        self.job: dict[str, str] | None = None
        #: What the try ran and trained into, once it ended (the operator's OpenLineage).
        self.facts: JobFacts | None = None
        self.run: dict[str, Any] = {}
        self.summary: dict[str, Any] | None = None

    @cached_property
    def wandb_hook(self) -> WandbHook:
        return self.parts.report.hook()

    def known(self, job: dict[str, str]) -> None:
        """The job waited on, from the moment it exists."""
        self.job = job

    def run_id(self, job: Mapping[str, Any] | None) -> str | None:
        """The W&B run the job writes to: ``wandb_run_id``, else the one the job names."""
        return self.wandb_run_id or (wandb_run_of(job) if job else None)

    def wait(self, job: Mapping, *, deferred: bool, **how: Any) -> WaitResult | VolcanoJobTrigger:
        """The wait on ``job`` (its name, namespace and uid) as :meth:`trigger` says ``how``:
        its result, waited for here, or, ``deferred``, the trigger to defer to once the job
        still runs after ``defer_after`` seconds waited for here (without the master's log,
        which the triggerer may follow)."""
        how.setdefault("waiting_since", time.time())  # one startup budget for the try
        if not deferred:
            return self.wait_here(self.trigger(job, deferred=False, **how))
        if (window := self.options.defer_after) > 0:
            first = self.trigger(job, deferred=False, follow=False, **how)
            if (ended := self.wait_here(first, within=window)) is not None:
                return ended
            self.shell.log.info(
                "Volcano job %s/%s still runs after %gs: deferring to the triggerer",
                job["namespace"],
                job["name"],
                window,
            )
        return self.trigger(job, deferred=True, **how)

    def trigger(
        self,
        job: Mapping[str, Any],
        *,
        deferred: bool,
        deadline: float | None,
        poll_interval: float,
        run_id: str | None,
        waiting_since: float | None = None,
        follow: bool | None = None,
    ) -> VolcanoJobTrigger:
        """The wait on ``job``, ``deferred`` or in the task's process (which follows the
        master's log unless ``follow`` says otherwise), asking W&B run ``run_id``."""
        parts = self.parts
        if follow is None:
            follow = parts.logs.follow_master_log or not deferred
        masked = [self.wandb_hook.mask_api_key()] if follow else []
        return VolcanoJobTrigger(
            job_name=job["name"],
            namespace=job["namespace"],
            job_uid=job.get("uid") or None,
            **parts.connection.kwargs(),
            pending_timeout=self.options.pending_seconds(),
            deadline=deadline,
            poll_interval=poll_interval,
            delete_on_kill=self.delete_on_kill,
            watch_failure_grace=self.options.watch_failure_grace,
            try_number=self.try_number,
            **parts.logs.trigger_kwargs(masked, follow=follow),
            deferred_at=time.time() if deferred else None,
            waiting_since=waiting_since or time.time(),
            **parts.limits.trigger_kwargs(),
            **parts.report.progress_kwargs(run_id, parts.limits.asks_wandb, self.wandb_hook),
        )

    def wait_here(self, trigger: VolcanoJobTrigger, within: float | None = None) -> Any:
        """The same wait the triggerer would run, in this process, logging to the task log
        (for ``within`` seconds at most: ``None`` when the job still runs then). A kill or any
        failure meanwhile deletes the job and is raised."""
        trigger._log = self.shell.log
        try:
            event = asyncio.run(_first_event(trigger, within))
            return None if event is None else WaitResult.from_event(event)
        except AirflowTaskTimeout:  # execution_timeout, armed at the task's start
            if (ended := self.out_of_time()) is None:
                raise
            return ended
        except BaseException:  # a kill, or a failure: nobody would wait on the job any more
            if self.delete_on_kill:
                self.delete()
            raise

    def out_of_time(self) -> WaitResult | None:
        """The wait ran out of time: the job's own end when the apiserver shows one now (it
        ended unseen, say during a watch outage); else ``None``, and the job is deleted."""
        ended = self.job and job_report.ended_meanwhile(self.shell.hook, self.job, self.shell.log)
        if not ended:
            self.delete()
        return ended or None

    def finish(
        self,
        result: WaitResult,
        context: Any,
        run: Mapping[str, Any] | None = None,
        resumed: bool = False,
    ) -> dict[str, Any]:
        """Clean up as ``on_finish_action`` says, tell what happened (XComs, the W&B run
        ``run``, by default the one the job names, the outlets' asset events) and succeed with
        the job's reference, or raise the failure's exception (its class names the cause)."""
        ti, hook, log, report = context["ti"], self.shell.hook, self.shell.log, self.parts.report
        self.wandb_hook.mask_api_key()  # a resumed task is a new process: logs may echo it
        if result.uid:
            self.job = result.job_ref()
        self.facts = JobFacts.from_job({"metadata": result.job_ref()})
        patched = job_report.mark_reported(hook, result, ti.try_number, log)
        deletes = cleanup.deletes_job(result.outcome, self.options.on_finish_action)
        job = None
        if result.outcome.succeeded or run is None:
            job = job_report.fetch_finished_job(hook, result, log, patched)
        if run is None:
            run = report.run_of(run_id, ti) if (run_id := self.run_id(job)) else {}
        self.run = dict(run)
        if not result.outcome.succeeded:
            error = job_report.report_failure(
                hook,
                result,
                delete_job=self.delete if deletes else None,
                log_lines=self.parts.logs.log_lines,
                task_log=log,
                run_url=run.get("wandb_run_url"),
            )
            self._ended(context, result, run, error)
            raise error
        log.info("%s", result.message)
        pods = job_report.finished_job_pods(hook, job, log)  # before a delete
        usage = None if pods is None else job_report.log_gpu_seconds(job, pods, log)
        ti.xcom_push(key=job_report.XCOM_GPU_SECONDS, value=usage)
        if self.resume is not None:
            run = {**run, **self.resume.say_resumed_step(hook, job, ti, run)}
        if job:
            self.facts = JobFacts.from_job(job)
            # A wait resumed from the trigger streamed nothing of the master unless the
            # trigger followed its log, whose lines are in the task log already; a job that
            # ended in the worker's first window was followed by nobody.
            followed = resumed and self.parts.logs.follow_master_log
            if self.options.deferrable and not followed and pods is not None:
                job_report.log_master_tail(hook, job, self.parts.logs.log_lines, log, pods)
        self._ended(context, result, run, None)  # before a delete: the next try knows
        if deletes:
            self.delete()
        summary, rates = report.push_summary(ti, run) if run else (None, {})
        self.summary = summary
        if self.shell.outlets:  # the record travels with the asset event (docs/assets.md)
            extra = asset_extra(self.facts, run, summary, usage, rates)
            _annotate_outlet_events(context, self.shell.outlets, extra)
        summary_part = {"wandb_summary": summary} if summary is not None else {}
        return {**result.job_ref(), **run, **summary_part, "phase": result.phase}

    def _ended(self, context: Any, result: WaitResult, run: Mapping, error: Any) -> None:
        """The wait ended (``error``: what the task fails with): tell the next try (the cause,
        for ``resume_on``) and the W&B run (the link back)."""
        if self.resume is not None:
            self.resume.record_cause(task_state_store(context), result.uid, error)
        if run:
            outcome = "success" if error is None else result.outcome.value
            self.parts.report.link_back(context, run, outcome)

    def delete(self, *, kill: bool = False) -> None:
        """Delete the job unless a newer try adopted it (for a ``kill``: unless it has ended,
        or ``delete_on_kill`` is off); log, never raise."""
        if self.job and (self.delete_on_kill or not kill):
            hook, log = self.shell.hook, self.shell.log
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


def _annotate_outlet_events(context: Any, outlets: Iterable[Any], extra: Mapping) -> None:
    """Add ``extra`` to the event Airflow emits for every concrete asset among ``outlets``
    when the task succeeds (asset aliases are left alone: an alias event needs the asset it
    resolves to, which only the DAG author knows)."""
    for outlet in outlets:
        if isinstance(outlet, Asset):
            context["outlet_events"][outlet].extra.update(extra)

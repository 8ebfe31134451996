"""Wait on a Volcano job submitted earlier (the operator with ``wait_for_completion=False``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, Context

from airflow_volcano_wandb.airflow_compat import AirflowSensorTimeout, AirflowTaskTimeout
from airflow_volcano_wandb.exceptions import ApiserverUnreachableError
from airflow_volcano_wandb.job import deletion
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_facts import JobFacts, asset_extra
from airflow_volcano_wandb.job.job_status import job_ref
from airflow_volcano_wandb.job.ownership import wandb_run_of
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.parts import options
from airflow_volcano_wandb.parts.assets import annotate_outlet_events
from airflow_volcano_wandb.parts.log_follow import masked_digests
from airflow_volcano_wandb.parts.wandb_report import XCOM_RUN_URL
from airflow_volcano_wandb.sensors.sensor_parts import OPTIONS, SensorParts
from airflow_volcano_wandb.triggers.volcano import (
    VolcanoJobTrigger,
    pod_check_interval,
    progress_interval,
)
from airflow_volcano_wandb.wait import cleanup, job_report, step_io
from airflow_volcano_wandb.wait.judge import WaitTarget, judge
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.stall import WandbRunRef
from airflow_volcano_wandb.wait.step import WaitMemory
from airflow_volcano_wandb.wait.wandb_progress import WandbProgress

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook


class VolcanoJobSensor(BaseSensorOperator):
    __doc__ = f"""Succeed when the Volcano job is ``Completed``; fail, with the reason, when it
    fails.

    The same judgement (``judge.py``), diagnostics and cleanup rule as
    ``VolcanoPyTorchJobOperator``: ``Failed``, ``Terminated``, ``Aborted`` and a deleted job
    fail the sensor at once; a gang not wholly placed within ``pending_timeout`` fails it with
    Volcano's unschedulable reason; containers restarting in place past
    ``max_container_restarts`` fail it with ``TrainerCrashLoopError``, a master silent for
    ``stall_timeout`` with ``TrainingStalledError``. The job is the sensor's to clean up: by
    default it is deleted after success, on a pending timeout, a crash loop, a stall, the
    sensor's timeout and when the task is killed, so nothing is left running or holding the
    API key.

    With ``follow_master_log``, the master pod's log is shown in this task's log while it
    waits: by the triggerer when deferred, by a thread of this process in ``poke`` mode. In
    ``reschedule`` mode nothing is followed (each poke is a new process).

    The sensor's own parameters are ``sensor_parts.SensedJob``'s; the W&B report, the pod
    logs (the sensor shows pod log tails on failure only), the restart budget, the startup
    budget and the stall timeout (each poke, or the trigger, reads a waiting job's pods for
    their restarts and for a container that cannot start, and probes its master's log for a
    stall when one is due) and the connection are the parts it shares with the operator
    (``parts/``).

{options.param_docs(OPTIONS, indent="    ")}
"""

    template_fields: Sequence[str] = options.templated(OPTIONS)
    operator_extra_links = (WandbRunLink(),)

    def __init__(self, **kwargs: Any) -> None:
        given = options.take(OPTIONS, kwargs)
        super().__init__(**kwargs)
        for name, value in given.items():
            setattr(self, name, value)
        self._failing_since: float | None = None
        self._memory = WaitMemory()  # of this process: each rescheduled poke starts afresh
        self._waiting_since = time.time()  # the same: a rescheduled poke counts from itself
        #: The run a poke's stall probe asks (``False``: none; ``None``: not known yet).
        self._wandb: WandbProgress | bool | None = None
        #: The submission waited on: ``job_uid``'s, else the first one seen.
        self._job: dict[str, str] | None = None

    __init__.__signature__ = options.signature(OPTIONS)  # type: ignore[attr-defined]

    @cached_property
    def parts(self) -> SensorParts:
        """Built at first use, in ``execute``: after Airflow rendered the templated options."""
        return SensorParts.of(self)

    @cached_property
    def hook(self) -> VolcanoHook:
        # One hook per task run: its connection lookup and API clients serve every poke.
        return self.parts.connection.hook()

    def _target(self) -> WaitTarget:
        job = self.parts.job
        deadline = time.time() + self.timeout if self.timeout and job.deferrable else None
        return WaitTarget(
            name=job.job_name,
            namespace=job.namespace or self.hook.get_namespace() or "default",
            uid=job.job_uid or (self._job or {}).get("uid") or None,
            pending_timeout=job.pending_timeout,
            deadline=deadline,
            **self.parts.limits.trigger_kwargs(),
            pod_check_interval=pod_check_interval(),
            progress_interval=progress_interval(),
            waiting_since=self._waiting_since,
        )

    def execute(self, context: Context) -> Any:
        if not self.parts.job.deferrable:
            try:
                with self._master_log_followed():
                    return super().execute(context)
            except (AirflowSensorTimeout, AirflowTaskTimeout):
                ended = self._job and job_report.ended_meanwhile(self.hook, self._job, self.log)
                if ended:  # it ended while the last pokes could not see it
                    return self._report(ended, context)
                self._delete_job()  # nobody waits on it any more
                raise
        target = self._target()
        job = self.hook.get_job(target.name, target.namespace)
        self._remember(job)
        result = judge(job, target, time.time())
        if result is not None:
            return self._report(result, context)
        self.defer(
            trigger=self._trigger(target, job),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def _trigger(self, target: WaitTarget, job: dict[str, Any] | None = None) -> VolcanoJobTrigger:
        """The wait in the triggerer; the key of ``wandb_conn_id`` is masked in the log it
        follows, and the steps of ``job``'s W&B run count as progress for ``stall_timeout``."""
        parts = self.parts
        masked = [parts.report.hook().mask_api_key()] if parts.logs.follow_master_log else []
        return VolcanoJobTrigger(
            job_name=target.name,
            namespace=target.namespace,
            job_uid=target.uid,
            **parts.connection.kwargs(),
            pending_timeout=parts.job.pending_timeout,
            deadline=target.deadline,
            poll_interval=self.poke_interval,
            delete_on_kill=parts.job.delete_on_kill,
            watch_failure_grace=parts.job.watch_failure_grace,
            **parts.logs.trigger_kwargs(masked),
            deferred_at=time.time(),
            waiting_since=target.waiting_since,
            **parts.limits.trigger_kwargs(),
            **self._wandb_progress_kwargs(job),
        )

    def _run_id(self, job: dict[str, Any] | None) -> str | None:
        """The W&B run the job writes to: ``wandb_run_id``, else the one the job names."""
        return self.parts.job.wandb_run_id or (wandb_run_of(job) if job else None)

    def _wandb_progress_kwargs(self, job: dict[str, Any] | None) -> dict[str, Any]:
        """The online W&B run the wait asks (``WandbReport.progress_kwargs``)."""
        return self.parts.report.progress_kwargs(self._run_id(job), self.parts.limits.asks_wandb)

    @contextlib.contextmanager
    def _master_log_followed(self) -> Iterator[None]:
        """In ``poke`` mode with ``follow_master_log``: the master's log, while poking."""
        logs = self.parts.logs
        if not logs.follow_master_log or self.mode != "poke":
            yield
            return
        target = self._target()
        job = self.hook.get_job(target.name, target.namespace)
        if job is None or (target.uid and job["metadata"].get("uid") != target.uid):
            yield  # nothing to follow: the poke says what became of the job
            return
        # The async follow's imports (the asyncio Kubernetes client) only when it runs.
        from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
        from airflow_volcano_wandb.logs.master_log import MasterLogThread

        key = self.parts.report.hook().mask_api_key()  # masked here, and by the follow
        connection = self.parts.connection.kwargs()
        follower = MasterLogThread(
            lambda: AsyncVolcanoHook(**connection),
            target.name,
            target.namespace,
            self.log,
            logs.master_log_max_lines,
            logs.master_log_max_bytes,
            masked_digests([key]),
        )
        follower.start()
        try:
            yield
        finally:
            follower.stop()

    def poke(self, context: Context) -> bool:
        target = self._target()
        try:
            job = self.hook.get_job(target.name, target.namespace)
        except Exception as exc:  # a blip, or a RoleBinding re-applied: as the watch's grace
            return self._unread(target, exc)
        self._failing_since = None
        self._remember(job)
        # The trigger's step, over the sync hook: the same lines, gang mark and verdicts.
        if self._wandb is None and job is not None:  # once the job shows its run
            run = WandbRunRef.of_kwargs(self._wandb_progress_kwargs(job))
            self._wandb = WandbProgress(run) if run is not None else False
        self._memory, result = step_io.take_step_sync(
            self.hook, job, target, self._memory, self.log, wandb=self._wandb or None
        )
        if result is None:
            return False
        self._report(result, context)
        return True

    def _unread(self, target: WaitTarget, exc: Exception) -> bool:
        """A poke that could not read the job: poke again, unless reads have failed for
        ``watch_failure_grace`` (then fail, leaving the job untouched)."""
        now, grace = time.monotonic(), self.parts.job.watch_failure_grace
        self._failing_since = self._failing_since or now
        where = f"Volcano job {target.namespace}/{target.name}"
        if now - self._failing_since < grace:
            self.log.warning("Could not read %s (%s); poking again", where, exc)
            return False
        raise ApiserverUnreachableError(
            f"Could not read {where} for {grace:g}s: {exc}. The job was "
            "left untouched; the next try waits on it again."
        ) from exc

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's verdict into the task's outcome."""
        return self._report(WaitResult.from_event(event), context)

    def _remember(self, job: dict[str, Any] | None) -> None:
        """Pin the submission first seen, so a job recreated under its name is not it."""
        if job is None or self._job is not None:
            return
        uid = self.parts.job.job_uid
        if not uid or job["metadata"].get("uid") == uid:
            self._job = job_ref(job)

    def _report(self, result: WaitResult, context: Context) -> dict[str, Any]:
        """Clean up as ``on_finish_action`` says, report to the W&B run, succeed or fail."""
        report, ti = self.parts.report, context["ti"]
        # The failure report shows pod logs, which may echo the key the pods were given.
        report.hook().mask_api_key()
        if result.uid:
            self._job = result.job_ref()
        patched = job_report.mark_reported(self.hook, result, ti.try_number, self.log)
        deletes = cleanup.deletes_job(result.outcome, self.parts.job.on_finish_action)
        job = job_report.fetch_finished_job(self.hook, result, self.log, patched)
        run = report.run_of(run_id, ti) if (run_id := self._run_id(job)) else None
        if result.outcome.succeeded:
            self.log.info("%s", result.message)
            usage = job_report.log_gpu_seconds(self.hook, job, self.log)  # before a delete
            ti.xcom_push(key=job_report.XCOM_GPU_SECONDS, value=usage)
            if deletes:
                self._delete_job()
            summary, rates = report.push_summary(ti, run) if run else (None, {})
            if run:
                report.link_back(context, run, "success")
            if self.outlets:  # the same record as the operator's (docs/assets.md)
                facts = JobFacts.from_job(job or {"metadata": result.job_ref()})
                extra = asset_extra(facts, run or {}, summary, usage, rates)
                annotate_outlet_events(context, self.outlets, extra)
            summary_part = {"wandb_summary": summary} if summary is not None else {}
            return {**result.job_ref(), **(run or {}), **summary_part, "phase": result.phase}
        error = job_report.report_failure(
            self.hook,
            result,
            delete_job=self._delete_job if deletes else None,
            log_lines=self.parts.logs.log_lines,
            task_log=self.log,
            run_url=(run or {}).get(XCOM_RUN_URL),
        )
        if run:
            report.link_back(context, run, result.outcome.value)
        if result.outcome is Ending.TIMEOUT:  # a sensor's timeout is never retried
            raise AirflowSensorTimeout(str(error)) from error
        raise error

    def _delete_job(self, *, kill: bool = False) -> None:
        if self._job:
            deletion.delete_if_owned(self.hook, self._job, None, self.log, kill=kill)

    def on_kill(self) -> None:
        """Killed while poking: the job must not run on unwatched (one that ended is left)."""
        if self.parts.job.delete_on_kill:
            self._delete_job(kill=True)

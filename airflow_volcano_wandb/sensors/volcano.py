"""Wait on a Volcano job submitted earlier (the operator with ``wait_for_completion=False``),
with the operator's wait (``JobWait``, ``Waiter``); its own options say which job and whether a
kill deletes it."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, Context

from airflow_volcano_wandb.airflow_compat import AirflowSensorTimeout, AirflowTaskTimeout
from airflow_volcano_wandb.exceptions import ApiserverUnreachableError, VolcanoJobError
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import job_ref
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.parts import options
from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.job_wait import JobWait
from airflow_volcano_wandb.parts.limits import RunLimits
from airflow_volcano_wandb.parts.log_follow import LogFollow, masked_digests
from airflow_volcano_wandb.parts.options import REQUIRED, build, option, options_of
from airflow_volcano_wandb.parts.wandb_report import WandbReport
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger, waiting_settings
from airflow_volcano_wandb.triggers.waiter import Waiter
from airflow_volcano_wandb.wait import step_io
from airflow_volcano_wandb.wait.judge import WaitTarget, WandbRunRef, judge
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.step import WaitMemory
from airflow_volcano_wandb.wait.wandb_progress import WandbProgress

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook


@dataclass(frozen=True, kw_only=True)
class SensedJob:
    """The job the sensor waits on, and whether a kill deletes it."""

    job_name: str = option(
        REQUIRED,
        """the job, e.g. ``"{{ ti.xcom_pull('submit', key='volcano_job')['name'] }}"``.""",
        templated=True,
    )
    job_uid: str | None = option(
        None,
        """the submission to wait on (e.g. the ``volcano_job`` XCom's ``uid``); a job of the
        same name but another uid counts as this one deleted.""",
        templated=True,
    )
    delete_on_kill: bool = option(
        True, "delete the job when the task is killed, cleared or marked failed."
    )
    wandb_run_id: str | None = option(
        None,
        """the W&B run the job writes to; by default the one the operator recorded on the job
        (its ``wandb-run-id`` label). The sensor reports to it as the operator's own wait
        does: the task and its outcome are written into the run, the ``wandb_summary_keys``
        are read back into XCom ``wandb_summary`` and the asset events of ``outlets``, and
        XComs ``wandb_run_id``/``wandb_run_url`` give the sensor its "W&B Run" button. Its
        steps, when it is online, count as progress for ``stall_timeout``.""",
        templated=True,
    )


@dataclass(frozen=True)
class SensorParts:
    """Everything the sensor knows, typed, once its options are rendered."""

    job: SensedJob
    wait: JobWait
    connection: Connection
    report: WandbReport
    logs: LogFollow
    limits: RunLimits

    @classmethod
    def of(cls, sensor: Any) -> SensorParts:
        return cls(
            job=build(SensedJob, sensor),
            wait=build(JobWait, sensor),
            connection=build(Connection, sensor),
            report=build(WandbReport, sensor, log=sensor.log),
            logs=build(LogFollow, sensor),
            limits=build(RunLimits, sensor),
        )


#: The sensor's options, part by part (the order of its docstring).
OPTIONS = options_of(SensedJob, JobWait, WandbReport, LogFollow, RunLimits, Connection)


class VolcanoJobSensor(BaseSensorOperator):
    __doc__ = f"""Succeed when the Volcano job is ``Completed``; fail, with the reason, when it
    fails.

    The operator's wait (``parts/job_wait.py``: its judgement, limits, diagnostics, report to
    the W&B run and cleanup rule) on a job submitted earlier: by default the job is deleted
    after success, on a pending timeout, a crash loop, a stall, the sensor's timeout and when
    the task is killed, so nothing is left running or holding the API key. Each poke (or the
    trigger) takes the trigger's step over the job and its pods.

    With ``follow_master_log``, the master pod's log is shown in this task's log while it
    waits: by the triggerer when deferred, by a thread of this process in ``poke`` mode. In
    ``reschedule`` mode nothing is followed (each poke is a new process).

{options.param_docs(OPTIONS, indent="    ")}
"""

    template_fields: Sequence[str] = options.templated(OPTIONS)
    operator_extra_links = (WandbRunLink(),)

    def __init__(self, **kwargs: Any) -> None:
        options.init_shell(self, super().__init__, OPTIONS, kwargs)
        self._failing_since: float | None = None
        self._memory = WaitMemory()  # of this process: each rescheduled poke starts afresh
        self._waiting_since = time.time()  # the same: a rescheduled poke counts from itself
        #: The run a poke's stall probe asks (``False``: none; ``None``: not known yet).
        self._wandb: WandbProgress | bool | None = None

    __init__.__signature__ = options.signature(OPTIONS)  # type: ignore[attr-defined]

    @cached_property
    def parts(self) -> SensorParts:  # first used in execute, once Airflow rendered the options
        return SensorParts.of(self)

    @cached_property
    def waiter(self) -> Waiter:
        """The operator's wait; its job: ``job_uid``'s submission, else the first one seen."""
        job = self.parts.job
        return Waiter(
            self, self.parts, delete_on_kill=job.delete_on_kill, wandb_run_id=job.wandb_run_id
        )

    @cached_property
    def hook(self) -> VolcanoHook:
        # One hook per task run: its connection lookup and API clients serve every poke.
        return self.parts.connection.hook()

    def _target(self) -> WaitTarget:
        job, deferrable = self.parts.job, self.parts.wait.deferrable
        deadline = time.time() + self.timeout if self.timeout and deferrable else None
        return WaitTarget(
            name=job.job_name,
            namespace=self.parts.connection.namespace or self.hook.get_namespace() or "default",
            uid=job.job_uid or (self.waiter.job or {}).get("uid") or None,
            pending_timeout=self.parts.wait.pending_seconds(),
            deadline=deadline,
            **self.parts.limits.trigger_kwargs(),
            **waiting_settings(),
            waiting_since=self._waiting_since,
        )

    def execute(self, context: Context) -> Any:
        if not self.parts.wait.deferrable:
            try:
                with self._master_log_followed():
                    return super().execute(context)
            except (AirflowSensorTimeout, AirflowTaskTimeout):
                if (ended := self.waiter.out_of_time()) is None:
                    raise
                return self._finish(ended, context)
        target = self._target()
        job = self.hook.get_job(target.name, target.namespace)
        self._remember(job)
        if (result := judge(job, target, time.time())) is None:
            result = self.waiter.wait(  # the steps of the job's W&B run count as progress
                {"name": target.name, "namespace": target.namespace, "uid": target.uid},
                deferred=True,
                deadline=target.deadline,
                poll_interval=self.poke_interval,
                run_id=self.waiter.run_id(job),
                waiting_since=target.waiting_since,
            )
        if isinstance(result, VolcanoJobTrigger):
            timeout = timedelta(seconds=self.timeout) if self.timeout else None
            self.defer(trigger=result, method_name="execute_complete", timeout=timeout)
        return self._finish(result, context)

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

        key = self.waiter.wandb_hook.mask_api_key()  # masked here, and by the follow
        connection, asks = self.parts.connection.kwargs(), self.parts.limits.asks_wandb
        follower = MasterLogThread(
            lambda: AsyncVolcanoHook(**connection),
            target.name,
            target.namespace,
            self.log,
            logs.master_log_max_lines,
            logs.master_log_max_bytes,
            masked_digests([key]),
            progress=not self.parts.report.progress_kwargs(self.waiter.run_id(job), asks),
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
            asks, run_id = self.parts.limits.asks_wandb, self.waiter.run_id(job)
            run = WandbRunRef.of_kwargs(self.parts.report.progress_kwargs(run_id, asks))
            self._wandb = WandbProgress(run) if run is not None else False
        self._memory, result = step_io.take_step_sync(
            self.hook, job, target, self._memory, self.log, wandb=self._wandb or None
        )
        if result is None:
            return False
        self._finish(result, context)
        return True

    def _unread(self, target: WaitTarget, exc: Exception) -> bool:
        """Poke again, unless reads have failed for ``watch_failure_grace`` (then fail)."""
        now, grace = time.monotonic(), self.parts.wait.watch_failure_grace
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
        return self._finish(WaitResult.from_event(event), context, resumed=True)

    def _remember(self, job: dict[str, Any] | None) -> None:
        """Pin the submission first seen, so a job recreated under its name is not it."""
        if job is None or self.waiter.job is not None:
            return
        uid = self.parts.job.job_uid
        if not uid or job["metadata"].get("uid") == uid:
            self.waiter.known(job_ref(job))

    def _finish(
        self, result: WaitResult, context: Context, resumed: bool = False
    ) -> dict[str, Any]:
        """The operator's report (``Waiter.finish``); a sensor's timeout is never retried."""
        try:
            return self.waiter.finish(result, context, resumed=resumed)
        except VolcanoJobError as error:
            if result.outcome is Ending.TIMEOUT:
                raise AirflowSensorTimeout(str(error)) from error
            raise

    def on_kill(self) -> None:
        """Killed while poking: the job must not run on unwatched (one that ended is left)."""
        self.waiter.delete(kill=True)

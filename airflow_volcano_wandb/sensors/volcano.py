"""Wait on a Volcano job submitted earlier (the operator with ``wait_for_completion=False``),
with the operator's wait (``JobWait``, ``Waiter``); its own options say which job and whether a
kill deletes it (``sensor_parts.py``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseSensorOperator, Context

from airflow_volcano_wandb.airflow_compat import AirflowSensorTimeout, AirflowTaskTimeout
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.parts import options
from airflow_volcano_wandb.parts.waiter import Waiter
from airflow_volcano_wandb.sensors.sensor_parts import OPTIONS, Pokes, SensorParts
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger, target_here
from airflow_volcano_wandb.triggers.wait_spec import WaitSpec
from airflow_volcano_wandb.wait.judge import JobTarget, judge
from airflow_volcano_wandb.wait.outcome import WaitResult

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook


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
        self._pokes = Pokes()

    __init__.__signature__ = options.signature(OPTIONS)  # type: ignore[attr-defined]

    @cached_property
    def parts(self) -> SensorParts:  # first used in execute, once Airflow rendered the options
        return SensorParts.of(self)

    @cached_property
    def waiter(self) -> Waiter:
        """The operator's wait; its job: ``job_uid``'s submission, else the first one seen."""
        job = self.parts.job
        return Waiter(
            self,
            self.parts,
            delete_on_kill=job.delete_on_kill,
            wandb_run_id=job.wandb_run_id,
            timeout_error=AirflowSensorTimeout,  # a sensor's timeout is never retried
        )

    @cached_property
    def hook(self) -> VolcanoHook:
        # One hook per task run: its connection lookup and API clients serve every poke.
        return self.parts.connection.hook()

    def _job(self) -> dict[str, Any]:
        """The sensed job: ``job_uid``'s submission, else the first one seen (if any yet)."""
        namespace = self.parts.connection.namespace or self.hook.get_namespace() or "default"
        uid = self.parts.job.job_uid or (self.waiter.job or {}).get("uid")
        return {"name": self.parts.job.job_name, "namespace": namespace, "uid": uid}

    def _how(self, job: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """How the sensor waits (``Waiter.spec``), asking the W&B run ``job`` names."""
        deferrable = self.parts.wait.deferrable
        return {
            "deadline": time.time() + self.timeout if self.timeout and deferrable else None,
            "poll_interval": self.poke_interval,
            "run_id": self.waiter.run_id(job) if job is not None else None,
            "waiting_since": self._pokes.waiting_since,
        }

    def _spec(self, job: Mapping[str, Any] | None = None, *, follow: bool = False) -> WaitSpec:
        return self.waiter.spec(self._job(), deferred=False, follow=follow, **self._how(job))

    def _target(self) -> JobTarget:
        return target_here(self._spec())

    def execute(self, context: Context) -> Any:
        if not self.parts.wait.deferrable:
            return self._poke_until_done(context)
        target = self._target()
        job = self.hook.get_job(target.job_name, target.namespace)
        self.waiter.pin(job, self.parts.job.job_uid)
        result: WaitResult | VolcanoJobTrigger | None = judge(job, target, time.time())
        if result is None:
            sensed = {"name": target.job_name, "namespace": target.namespace, "uid": target.job_uid}
            result = self.waiter.wait(sensed, deferred=True, **self._how(job))
        if isinstance(result, VolcanoJobTrigger):
            timeout = timedelta(seconds=self.timeout) if self.timeout else None
            self.defer(trigger=result, method_name="execute_complete", timeout=timeout)
        return self.waiter.finish(result, context)

    def _poke_until_done(self, context: Context) -> Any:
        """``poke`` until the job ends; in ``poke`` mode, ``follow_master_log`` follows the
        master's log meanwhile (unless there is no job yet: the poke says what became of it)."""
        followed: contextlib.AbstractContextManager[None] = contextlib.nullcontext()
        if self.parts.logs.follow_master_log and self.mode == "poke":
            spec = self._spec()
            if (job := self.hook.get_job(spec.job_name, spec.namespace)) and spec.is_ours(job):
                followed = self.waiter.master_log_followed(self._spec(job, follow=True))
        try:
            with followed:
                return super().execute(context)
        except (AirflowSensorTimeout, AirflowTaskTimeout):
            if (ended := self.waiter.out_of_time()) is None:
                raise
            return self.waiter.finish(ended, context)

    def poke(self, context: Context) -> bool:
        target = self._target()
        try:
            job = self.hook.get_job(target.job_name, target.namespace)
        except Exception as exc:  # a blip, or a RoleBinding re-applied: as the watch's grace
            grace = self.parts.wait.watch_failure_grace
            return self._pokes.unread(target, exc, grace, self.log)
        self.waiter.pin(job, self.parts.job.job_uid)
        wandb_run = lambda: self._spec(job).wandb_run()  # noqa: E731
        if (result := self._pokes.step(self.hook, job, target, self.log, wandb_run)) is None:
            return False
        self.waiter.finish(result, context)
        return True

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's verdict into the task's outcome."""
        return self.waiter.finish(WaitResult.from_event(event), context, resumed=True)

    def on_kill(self) -> None:
        """Killed while poking: the job must not run on unwatched (one that ended is left)."""
        self.waiter.delete(kill=True)

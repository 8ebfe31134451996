"""The parts ``VolcanoPyTorchJobOperator`` is made of, and its own options: the wait.

Each part is a frozen object built once per ``execute`` (or ``execute_complete``) from the
operator's flat attributes, after Airflow rendered the templated ones; the operator's
signature, ``:param:`` lines and ``template_fields`` are read off the parts' declared options
(``parts/options.py``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from airflow.configuration import conf

from airflow_volcano_wandb.airflow_compat import task_state_store
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.job.resume import Resumption
from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.job_request import JobRequest
from airflow_volcano_wandb.parts.limits import RunLimits, templated_seconds
from airflow_volcano_wandb.parts.log_follow import LogFollow
from airflow_volcano_wandb.parts.options import build, option, options_of
from airflow_volcano_wandb.parts.resumption import ResumePolicy
from airflow_volcano_wandb.parts.training_run import TrainingRun
from airflow_volcano_wandb.parts.wandb_report import WandbReport
from airflow_volcano_wandb.triggers.volcano import DEFAULT_WATCH_FAILURE_GRACE, VolcanoJobTrigger
from airflow_volcano_wandb.wait import cleanup
from airflow_volcano_wandb.wait.cleanup import OnFinishAction
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wandb.wandb_run import WandbRunSpec


@dataclass(frozen=True, kw_only=True)
class OperatorWait:
    """How the operator waits for its job, and what stays of it."""

    wait_for_completion: bool = option(
        True,
        """wait for the job to end (else return once submitted, for
        ``VolcanoJobSensor``).""",
    )
    deferrable: bool = option(
        conf.getboolean("operators", "default_deferrable", fallback=False),
        "wait in the triggerer, freeing the worker slot.",
    )
    poll_interval: float = option(
        10.0, "seconds between timeout checks; the job's state arrives by watch."
    )
    pending_timeout: float | str | None = option(
        None,
        """seconds until every rank must be placed and running; else the task fails with
        Volcano's reason and the job is deleted.""",
        templated=True,
    )
    watch_failure_grace: float = option(
        DEFAULT_WATCH_FAILURE_GRACE,
        """seconds the job may stay unreadable (watch and reads failing) before the task
        fails; the job is never deleted for that: the next try reattaches.""",
    )
    on_finish_action: OnFinishAction = option(
        "delete_succeeded",
        """``delete_succeeded`` (default: a failed job stays for inspection until a retry
        replaces it), ``delete`` or ``keep``.""",
        templated=True,
        check=cleanup.check_on_finish_action,
    )
    reattach_on_restart: bool = option(
        True,
        """reattach to a live job of this task instance; if False it is deleted and submitted
        again.""",
    )


@dataclass(frozen=True)
class OperatorParts:
    """Everything the operator knows, typed, once its options are rendered."""

    connection: Connection
    job: JobRequest
    run: TrainingRun
    report: WandbReport
    resume: ResumePolicy
    logs: LogFollow
    limits: RunLimits
    wait: OperatorWait

    @classmethod
    def of(cls, op: Any) -> OperatorParts:
        report = build(WandbReport, op, log=op.log)
        return cls(
            connection=build(Connection, op),
            job=build(JobRequest, op, owner=op.owner, log=op.log),
            run=build(TrainingRun, op, report=report, log=op.log),
            report=report,
            resume=build(ResumePolicy, op, log=op.log),
            logs=build(LogFollow, op),
            limits=build(RunLimits, op),
            wait=build(OperatorWait, op),
        )

    def render(
        self,
        context: Any,
        identity: TaskInstanceIdentity,
        wandb_hook: WandbHook,
        intent: int,
        resumed: Resumption | None,
        default_namespace: Callable[[], str | None],
    ) -> tuple[WandbRunSpec, dict[str, Any]]:
        """The W&B run and the Volcano Job of ``intent`` for the task instance of
        ``context``: its labels name the task instance, its pods' the try too."""
        try_number = context["ti"].try_number
        spec = self.run.spec(context, identity, wandb_hook, intent, resumed)
        put = {
            "annotations": identity.annotations(try_number),
            "labels": identity.job_labels(intent, spec.run_id),
            "pod_labels": identity.pod_labels(try_number),
            "default_namespace": default_namespace,
        }
        body = self.job.render(spec, wandb_hook, **put)
        if (name := self.resume.resumed_job_name(resumed, body, intent)) is None:
            return spec, body
        return spec, self.job.render(spec, wandb_hook, name=name, **put)

    def trigger(
        self,
        job: Mapping[str, str],
        try_number: int | None,
        execution_timeout: timedelta | None,
        masked: Sequence[str | None],
        deferred: bool,
        wandb_run: Mapping[str, Any] | None = None,
    ) -> VolcanoJobTrigger:
        """The wait on ``job``, ``deferred`` or in the task's process, masking ``masked``
        in the followed log, asking ``wandb_run`` on a stall; it ends by ``execution_timeout``."""
        deadline = time.time() + execution_timeout.total_seconds() if execution_timeout else None
        follow = self.logs.follow_master_log or not deferred  # the sync wait always follows
        return VolcanoJobTrigger(
            job_name=job["name"],
            namespace=job["namespace"],
            job_uid=job["uid"],
            **self.connection.kwargs(),
            pending_timeout=templated_seconds(self.wait.pending_timeout, "pending_timeout"),
            deadline=deadline,
            poll_interval=self.wait.poll_interval,
            watch_failure_grace=self.wait.watch_failure_grace,
            try_number=try_number,
            **self.logs.trigger_kwargs(masked, follow=follow),
            deferred_at=time.time() if deferred else None,
            waiting_since=time.time(),
            **self.limits.trigger_kwargs(),
            **(wandb_run or {}),
        )

    def end_run(self, context: Any, run: Any, result: WaitResult, error: Any) -> None:
        """The try's wait ended (``error``: what the task fails with; None for a success):
        tell the next try (the cause, for ``resume_on``) and the W&B run (the link back)."""
        self.resume.record_cause(task_state_store(context), result.uid, error)
        self.report.link_back(context, run, "success" if error is None else result.outcome.value)


#: The operator's options, part by part (the order of its docstring).
OPTIONS = options_of(
    JobRequest,
    TrainingRun,
    WandbReport,
    ResumePolicy,
    LogFollow,
    RunLimits,
    Connection,
    OperatorWait,
)

"""The parts ``VolcanoPyTorchJobOperator`` is made of, and the options only its wait has.

Each part is frozen, built once per ``execute`` (or ``execute_complete``) from the operator's
rendered attributes; its signature, docs and ``template_fields`` are read off the parts'
options (``parts/options.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.job.resume import Resumption
from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.job_request import JobRequest
from airflow_volcano_wandb.parts.job_wait import JobWait
from airflow_volcano_wandb.parts.limits import RunLimits
from airflow_volcano_wandb.parts.log_follow import LogFollow
from airflow_volcano_wandb.parts.options import build, option, options_of
from airflow_volcano_wandb.parts.resumption import ResumePolicy
from airflow_volcano_wandb.parts.training_run import TrainingRun
from airflow_volcano_wandb.parts.wandb_report import WandbReport
from airflow_volcano_wandb.wandb.wandb_run import WandbRunSpec


@dataclass(frozen=True, kw_only=True)
class OperatorWait:
    """What only the operator's wait has (the rest is the sensor's too: ``JobWait``)."""

    wait_for_completion: bool = option(
        True,
        """wait for the job to end (else return once submitted, for
        ``VolcanoJobSensor``).""",
    )
    poll_interval: float = option(
        10.0, "seconds between timeout checks; the job's state arrives by watch."
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
    wait: JobWait
    own: OperatorWait

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
            wait=build(JobWait, op),
            own=build(OperatorWait, op),
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
            "namespace": self.connection.namespace,
            "default_namespace": default_namespace,
        }
        body = self.job.render(spec, wandb_hook, **put)
        if (name := self.resume.resumed_job_name(resumed, body, intent)) is None:
            return spec, body
        return spec, self.job.render(spec, wandb_hook, name=name, **put)


#: The operator's options, part by part (the order of its docstring).
OPTIONS = options_of(
    JobRequest,
    TrainingRun,
    WandbReport,
    ResumePolicy,
    LogFollow,
    RunLimits,
    Connection,
    JobWait,
    OperatorWait,
)

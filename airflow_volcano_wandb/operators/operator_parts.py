"""The parts ``VolcanoPyTorchJobOperator`` is made of, and the options only its wait has.

Each part is frozen, built once per ``execute`` (or ``execute_complete``) from the operator's
rendered attributes; its signature, docs and ``template_fields`` are read off the parts'
options (``parts/options.py``).
"""

from __future__ import annotations

import dataclasses
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
class SubmitOptions:
    """What only the operator has: whether it waits once it submitted, and how it reattaches
    (the rest of its wait is the sensor's too: ``JobWait``)."""

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
    submit: SubmitOptions

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
            submit=build(SubmitOptions, op),
        )


@dataclass(frozen=True)
class TryRendering:
    """The W&B run and the Volcano Job of a try of the task instance of ``context``, for the
    try ``intent`` it is called with (a reported job may hold this try's number): its labels
    name the task instance, its pods' the try too; ``resumed``: the interrupted run it goes
    on with (:meth:`resuming`)."""

    parts: OperatorParts
    context: Any
    identity: TaskInstanceIdentity
    wandb_hook: WandbHook
    #: The namespace when neither the options nor the template name one: asked last, so that
    #: bad input fails before any API client exists.
    default_namespace: Callable[[], str | None]
    resumed: Resumption | None = None

    def resuming(self, resumed: Resumption) -> TryRendering:
        return dataclasses.replace(self, resumed=resumed)

    def __call__(self, intent: int) -> tuple[WandbRunSpec, dict[str, Any]]:
        parts, resumed, try_number = self.parts, self.resumed, self.context["ti"].try_number
        spec = parts.run.spec(self.context, self.identity, self.wandb_hook, intent, resumed)

        def job(name: str | None = None) -> dict[str, Any]:
            return parts.job.render(
                spec,
                self.wandb_hook,
                annotations=self.identity.annotations(try_number),
                labels=self.identity.job_labels(intent, spec.run_id),
                pod_labels=self.identity.pod_labels(try_number),
                namespace=parts.connection.namespace,
                default_namespace=self.default_namespace,
                name=name,
            )

        body = job()
        if (name := parts.resume.resumed_job_name(resumed, body, intent)) is None:
            return spec, body
        return spec, job(name)


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
    SubmitOptions,
)

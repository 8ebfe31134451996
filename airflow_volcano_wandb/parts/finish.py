"""The steps of a finished wait (``Waiter.finish``), one method each, in the order of
:data:`FINISH_STEPS`: tell what happened (XComs, the W&B run, the outlets' asset events),
clean up as ``on_finish_action`` says, and succeed or raise the failure's exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, Context

from airflow_volcano_wandb.job import gpu_usage
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_facts import JobFacts, asset_extra
from airflow_volcano_wandb.wait import cleanup, job_report
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.training_progress import METRICS_XCOM

if TYPE_CHECKING:
    from airflow_volcano_wandb.exceptions import VolcanoJobError
    from airflow_volcano_wandb.parts.waiter import Waiter


@dataclass
class Finishing:
    """One finished wait as :data:`FINISH_STEPS` hand it on, each step a method."""

    waiter: Waiter
    result: WaitResult
    context: Context
    #: The W&B run (id and URL); ``None`` until found: the one the job names.
    run: dict[str, Any] | None
    resumed: bool
    patched: dict[str, Any] | None = None
    job: dict[str, Any] | None = None
    pods: list[dict[str, Any]] | None = None
    usage: dict[str, float] | None = None
    summary: dict[str, Any] | None = None
    rates: dict[str, float] = field(default_factory=dict)

    @property
    def deletes(self) -> bool:
        return cleanup.deletes_job(self.result.outcome, self.waiter.parts.wait.on_finish_action)

    def mask_key(self) -> None:
        """A resumed task is a new process: its logs may echo the W&B key."""
        self.waiter.wandb_hook.mask_api_key()

    def note_job(self) -> None:
        if self.result.job_uid:
            self.waiter.job = self.result.job_ref()
        self.waiter.facts = JobFacts.from_job({"metadata": self.result.job_ref()})

    def mark_reported(self) -> None:
        """Before any read: a later try knows this one reported."""
        ti, waiter = self.context["ti"], self.waiter
        self.patched = job_report.mark_reported(
            waiter.task.hook, self.result, ti.try_number, waiter.task.log
        )

    def fetch_job(self) -> None:
        """The finished job, for a success's report or to find its W&B run."""
        if self.result.outcome.succeeded or self.run is None:
            task = self.waiter.task
            self.job = job_report.fetch_finished_job(task.hook, self.result, task.log, self.patched)

    def find_run(self) -> None:
        if self.run is None:
            run_id = self.waiter.run_id(self.job)
            ti = self.context["ti"]
            self.run = self.waiter.parts.report.run_of(run_id, ti) if run_id else {}
        self.waiter.run = dict(self.run)

    def push_metrics(self) -> None:
        """The metrics the followed master log's records gave, sampled: the Training tab's
        chart once ``CompleteJob`` deleted the pods (a failure's too, so before it raises)."""
        if self.result.metrics:
            self.context["ti"].xcom_push(key=METRICS_XCOM, value=dict(self.result.metrics))

    def fail(self) -> None:
        """A failure: report it (deleting the job if the rule says so), tell the next try and
        the W&B run, and raise it."""
        if self.result.outcome.succeeded:
            return
        waiter, run = self.waiter, self.waiter.run
        error: VolcanoJobError = job_report.report_failure(
            waiter.task.hook,
            self.result,
            delete_job=waiter.delete if self.deletes else None,
            log_lines=waiter.parts.logs.log_lines,
            task_log=waiter.task.log,
            run_url=run.get("wandb_run_url"),
        )
        waiter.ended(self.context, self.result, run, error)
        if waiter.timeout_error is not None and self.result.outcome is Ending.TIMEOUT:
            raise waiter.timeout_error(str(error)) from error
        raise error

    def log_success(self) -> None:
        self.waiter.task.log.info("%s", self.result.message)

    def push_gpu_seconds(self) -> None:
        """The job's pods are read once, before a delete: for its GPU-seconds and its tail."""
        task = self.waiter.task
        self.pods = job_report.finished_job_pods(task.hook, self.job, task.log)
        if self.pods is not None and self.job is not None:
            self.usage = job_report.log_gpu_seconds(self.job, self.pods, task.log)
        self.context["ti"].xcom_push(key=job_report.XCOM_GPU_SECONDS, value=self.usage)
        if self.job is not None and (elastic := gpu_usage.elastic_report(self.job, self.usage)):
            # An elastic job's range, re-formations and GPU-hours (the asset event's too).
            self.context["ti"].xcom_push(key=gpu_usage.ELASTIC_KEY, value=elastic)

    def say_resumed(self) -> None:
        waiter = self.waiter
        if waiter.resume is not None:
            said = waiter.resume.say_resumed_step(
                waiter.task.hook, self.job, self.context["ti"], waiter.run
            )
            waiter.run = {**waiter.run, **said}

    def show_master_tail(self) -> None:
        """A deferred wait's master, which no one followed, shows its last lines: a wait
        resumed from the trigger streamed them only if the trigger followed its log; a job
        that ended in the worker's first window was followed by nobody."""
        waiter, job = self.waiter, self.job
        if not job:
            return
        waiter.facts = JobFacts.from_job(job)
        followed = self.resumed and waiter.parts.logs.follow_master_log
        if waiter.parts.wait.deferrable and not followed and self.pods is not None:
            task, lines = waiter.task, waiter.parts.logs.log_lines
            job_report.log_master_tail(task.hook, job, lines, task.log, self.pods)

    def tell_ended(self) -> None:
        """Before a delete: the next try knows the cause."""
        self.waiter.ended(self.context, self.result, self.waiter.run, None)

    def delete(self) -> None:
        if self.deletes:
            self.waiter.delete()

    def push_summary(self) -> None:
        waiter = self.waiter
        if waiter.run:
            self.summary, self.rates = waiter.parts.report.push_summary(
                self.context["ti"], waiter.run
            )
        waiter.summary = self.summary

    def annotate_outlets(self) -> None:
        """The record travels with the asset event (docs/assets.md)."""
        waiter = self.waiter
        if waiter.task.outlets and waiter.facts is not None:  # note_job set them
            extra = asset_extra(waiter.facts, waiter.run, self.summary, self.usage, self.rates)
            _annotate_outlet_events(self.context, waiter.task.outlets, extra)


#: The steps of a finished wait, in their order (a unit test pins it): what a later try or the
#: cleanup reads is written before it reads it, and the job is deleted only once told.
FINISH_STEPS: tuple[Callable[[Finishing], None], ...] = (
    Finishing.mask_key,
    Finishing.note_job,
    Finishing.mark_reported,
    Finishing.fetch_job,
    Finishing.find_run,
    Finishing.push_metrics,
    Finishing.fail,
    Finishing.log_success,
    Finishing.push_gpu_seconds,
    Finishing.say_resumed,
    Finishing.show_master_tail,
    Finishing.tell_ended,
    Finishing.delete,
    Finishing.push_summary,
    Finishing.annotate_outlets,
)


def _annotate_outlet_events(context: Any, outlets: Iterable[Any], extra: Mapping) -> None:
    """Add ``extra`` to the event Airflow emits for every concrete asset among ``outlets``
    when the task succeeds (asset aliases are left alone: an alias event needs the asset it
    resolves to, which only the DAG author knows)."""
    for outlet in outlets:
        if isinstance(outlet, Asset):
            context["outlet_events"][outlet].extra.update(extra)

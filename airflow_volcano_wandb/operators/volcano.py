"""Submit a Volcano PyTorch job from a W&B Launch queue template, wait for it, report.

A thin Airflow shell: its options are its parts' (``operator_parts.py``), and ``execute`` /
``execute_complete`` below read, top to bottom, what a try does with them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_volcano_wandb.airflow_compat import task_state_store
from airflow_volcano_wandb.job import deletion, submission
from airflow_volcano_wandb.job.deployment import configured_deployment
from airflow_volcano_wandb.job.job_facts import JobFacts, asset_extra
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.operators import preview
from airflow_volcano_wandb.operators.operator_parts import OPTIONS, OperatorParts
from airflow_volcano_wandb.operators.sync_wait import wait_in_process
from airflow_volcano_wandb.parts import options
from airflow_volcano_wandb.parts.assets import annotate_outlet_events
from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.jinja_fields import render_own_fields
from airflow_volcano_wandb.parts.training_run import pulled_run, run_lineage
from airflow_volcano_wandb.parts.wandb_report import XCOM_RUN_ID, XCOM_RUN_URL, WandbReport
from airflow_volcano_wandb.template import job_as_yaml
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
from airflow_volcano_wandb.wait import cleanup, job_report
from airflow_volcano_wandb.wait.outcome import WaitResult

XCOM_JOB = "volcano_job"


class VolcanoPyTorchJobOperator(BaseOperator):
    __doc__ = f"""Run a multi-node PyTorch job on Volcano from a W&B Launch queue template.

    One task instance owns at most one live job, whatever its tries: the job carries labels
    naming the task instance, and a retry or a restarted worker finds it. A job still running
    is reattached; a completed one counts as this task's success without resubmitting; a
    failed, aborted or terminated one is deleted and submitted again.

    Two template layers apply, in this order: Airflow's ``{{{{ }}}}`` Jinja in the templated
    parameters when the task runs, then the queue template's own ``${{ }}`` run macros,
    structurally (``parts/job_request.py``).

{options.param_docs(OPTIONS, indent="    ")}
"""

    template_fields: Sequence[str] = (*options.templated(OPTIONS), preview.RENDERED_JOB)
    template_ext: Sequence[str] = (".yaml", ".yml", ".json")
    template_fields_renderers = {**options.renderers(OPTIONS), preview.RENDERED_JOB: "yaml"}
    operator_extra_links = (WandbRunLink(),)
    ui_color = "#ffd166"

    def __init__(self, **kwargs: Any) -> None:
        given = options.take(OPTIONS, kwargs)
        super().__init__(**kwargs)
        for name, value in given.items():
            setattr(self, name, value)
        #: The job this try submitted or reattached to, as soon as it exists (for on_kill).
        self._job: dict[str, str] | None = None
        self._try_number: int | None = None
        #: What this try ran and trained into, once it ended (for OpenLineage).
        self._facts: JobFacts | None = None
        self._run: dict[str, Any] = {}
        self._summary: dict[str, Any] | None = None
        self.rendered_job: str | None = None  # set by execute: preview.RENDERED_JOB

    @property
    def overwrite_rtif_after_execution(self) -> bool:  # the Rendered Template view's Job
        return self.rendered_job is not None

    __init__.__signature__ = options.signature(OPTIONS)  # type: ignore[attr-defined]

    def _do_render_template_fields(self, parent, template_fields, context, jinja_env, seen_oids):
        if parent is self:  # typed data and a template with variables: not rendered as text
            template_fields = render_own_fields(
                self, template_fields, context, jinja_env, seen_oids
            )
        super()._do_render_template_fields(parent, template_fields, context, jinja_env, seen_oids)

    @cached_property
    def hook(self):  # a VolcanoHook: its module, and the Kubernetes client, load on first use
        # One hook per task run: its connection lookup and API clients are reused by every call.
        return options.build(Connection, self).hook()

    def execute(self, context: Context) -> dict[str, Any]:
        parts = OperatorParts.of(self)
        ti = context["ti"]
        identity = TaskInstanceIdentity(
            ti.dag_id, ti.task_id, ti.run_id, ti.map_index, deployment=configured_deployment()
        )
        self._try_number = ti.try_number
        intent = self._try_number or 1
        wandb_hook, resumed = parts.report.hook(), None

        def render(intent: int) -> tuple[Any, dict[str, Any]]:
            # Bad input fails before any API client exists: the namespace is asked last.
            namespace = lambda: self.hook.get_namespace()  # noqa: E731
            return parts.render(context, identity, wandb_hook, intent, resumed, namespace)

        rendered = render(intent)  # bad input fails here, before any API client
        self.rendered_job = preview.shown(rendered[1], self.log)
        store = task_state_store(context)  # Airflow >= 3.3: kept across tries
        if (resumed := parts.resume.interrupted_run(self.hook, store, intent)) is not None:
            resumed = parts.run.settled(resumed)
            self.rendered_job = preview.shown((rendered := render(intent))[1], self.log)
        spec, job = submission.submit_for_try(
            self.hook,
            rendered,
            render,
            identity,
            try_number=intent,
            reattach=parts.wait.reattach_on_restart,
            api_key=None if parts.run.wandb_api_key_secret else wandb_hook.api_key,
            on_job=self._known,
            store=store,
            fit_check=parts.job.fit_checked(rendered[1]),
            task_log=self.log,
        )
        ti.xcom_push(key=XCOM_JOB, value=self._job)
        parts.resume.record_run(store, job)  # for the next try, the outcome not yet known
        run = parts.run.publish(ti, spec, job)
        parts.resume.say_resumed(resumed, job, ti, run)

        status = interpret(job)
        if status.terminal:  # only a Completed job is ever reused
            self.log.info("Job %s Completed in an earlier try; not resubmitting", status.name)
            return self._report(parts, context, WaitResult.from_status(status), run)
        if not parts.wait.wait_for_completion:
            return {**self._job, **run}
        asks = parts.limits.asks_wandb
        asked = parts.report.progress_kwargs(run[XCOM_RUN_ID], asks, wandb_hook)
        trigger = self._trigger(parts, [wandb_hook.api_key], parts.wait.deferrable, asked)
        if parts.wait.deferrable:
            resumed_with = {"run": run, preview.RENDERED_JOB: self.rendered_job}
            self.defer(trigger=trigger, method_name="execute_complete", kwargs=resumed_with)
        try:
            result = wait_in_process(self.hook, trigger, job, self.log)
        except BaseException as exc:
            # A kill or any failure while waiting here: nobody would wait on the job any more.
            self._delete_job()
            parts.resume.record_timeout(store, self._job, exc)  # a kill: told by the job gone
            raise
        return self._report(parts, context, result, run)

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any],
        run: Mapping[str, Any] | None = None,
        rendered_job: str | None = None,
    ) -> dict[str, Any]:
        """Resume after the trigger fired: report, clean up, and succeed or fail."""
        parts, self.rendered_job = OperatorParts.of(self), rendered_job  # the view keeps it
        self._try_number = context["ti"].try_number
        if run is None:  # dag.test() resumes without the deferral's kwargs: ask XCom
            run = pulled_run(context["ti"], self.task_id)
        return self._report(parts, context, WaitResult.from_event(event), dict(run))

    def _trigger(
        self,
        parts: OperatorParts,
        masked: Sequence[str | None],
        deferred: bool,
        wandb_run: Mapping | None = None,
    ) -> VolcanoJobTrigger:
        """The wait, ``deferred`` or here, masking ``masked``, asking ``wandb_run`` on a stall."""
        assert self._job is not None
        timeout, try_number = self.execution_timeout, self._try_number
        return parts.trigger(self._job, try_number, timeout, masked, deferred, wandb_run)

    def _report(
        self, parts: OperatorParts, context: Context, result: WaitResult, run: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Clean up as ``on_finish_action`` says, tell what happened, succeed or fail."""
        ti, hook = context["ti"], self.hook
        self._job = result.job_ref()
        self._facts, self._run = JobFacts.from_job({"metadata": self._job}), dict(run)
        parts.report.hook().mask_api_key()  # a resumed task is a new process: logs may echo it
        patched = job_report.mark_reported(hook, result, ti.try_number, self.log)
        deletes = cleanup.deletes_job(result.outcome, parts.wait.on_finish_action)
        if result.outcome.succeeded:
            self.log.info("%s", result.message)
            job = job_report.fetch_finished_job(hook, result, self.log, patched)
            pods = job_report.finished_job_pods(hook, job, self.log)  # before a delete
            usage = None if pods is None else job_report.log_gpu_seconds(hook, job, self.log, pods)
            ti.xcom_push(key=job_report.XCOM_GPU_SECONDS, value=usage)
            run = {**run, **parts.resume.say_resumed_step(hook, job, ti, run)}
            if job:
                self._facts = JobFacts.from_job(job)
                if parts.wait.deferrable and pods is not None:
                    job_report.log_master_tail(hook, job, parts.logs.log_lines, self.log, pods)
            parts.end_run(context, run, result, None)  # before a delete: the next try knows
            if deletes:
                self._delete_job()
            summary, rates = parts.report.push_summary(ti, run)
            self._summary = summary
            if self.outlets:  # the record travels with the asset event (docs/assets.md)
                extra = asset_extra(self._facts, run, summary, usage, rates)
                annotate_outlet_events(context, self.outlets, extra)
            summary_part = {"wandb_summary": summary} if summary is not None else {}
            return {**result.job_ref(), **run, **summary_part, "phase": result.phase}
        error = job_report.report_failure(
            hook,
            result,
            delete_job=self._delete_job if deletes else None,
            log_lines=parts.logs.log_lines,
            task_log=self.log,
            run_url=run.get(XCOM_RUN_URL),
        )
        parts.end_run(context, run, result, error)
        raise error  # its class names the cause, for retry policies

    def _known(self, job: dict[str, str]) -> None:
        self._job = job  # on_kill's, from the moment it exists

    def _delete_job(self, *, kill: bool = False) -> None:
        if self._job:
            deletion.delete_if_owned(self.hook, self._job, self._try_number, self.log, kill=kill)

    def dry_run(self) -> None:
        """Print the Volcano Job this task would submit, as YAML, and submit nothing.

        As ``KubernetesPodOperator.dry_run``: no Airflow run is needed. Templated options are
        rendered against the DAG's params' defaults; the run is named ``dry_run`` and the
        connections are read as the task would (the W&B key only to name its Secret: the job
        carries a reference, never the key).
        """
        print(job_as_yaml(preview.rendered_job(self)))

    def on_kill(self) -> None:
        """Killed while waiting in sync mode: delete the job and its pods, unless it ended."""
        self._delete_job(kill=True)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the Volcano job, the W&B run, its artifacts (docs/lineage.md)."""
        report = options.build(WandbReport, self, log=self.log)
        return run_lineage(report, self._facts, self._run, self._summary)

    #: A failed try's: the same facets, as far as the try got.
    get_openlineage_facets_on_failure = get_openlineage_facets_on_complete

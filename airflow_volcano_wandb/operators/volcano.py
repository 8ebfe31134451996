"""Submit a Volcano PyTorch job from a W&B Launch queue template, wait for it, report: a thin
shell over its parts (``operator_parts.py``); ``execute`` reads, top to bottom, what a try does.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any

from airflow.sdk import BaseOperator, Context

from airflow_volcano_wandb.airflow_compat import task_state_store
from airflow_volcano_wandb.job import submission
from airflow_volcano_wandb.job.deployment import configured_deployment
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.operators import preview
from airflow_volcano_wandb.operators.operator_parts import OPTIONS, OperatorParts, TryRendering
from airflow_volcano_wandb.parts import options
from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.jinja_fields import render_own_fields
from airflow_volcano_wandb.parts.training_run import pulled_run, run_lineage
from airflow_volcano_wandb.parts.waiter import Waiter
from airflow_volcano_wandb.parts.wandb_report import XCOM_RUN_ID, WandbReport
from airflow_volcano_wandb.template import job_as_yaml
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
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
        options.init_shell(self, super().__init__, OPTIONS, kwargs)
        #: This try's wait: its job, as soon as it exists (for on_kill), and what it ran and
        #: trained into, once it ended (for OpenLineage).
        self.waiter: Waiter | None = None
        self.rendered_job: str | None = None  # set by execute: preview.RENDERED_JOB

    @property  # BaseOperator's is a plain attribute; this one follows rendered_job
    def overwrite_rtif_after_execution(self) -> bool:  # type: ignore[override]
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

    def _waiter(self, parts: OperatorParts, try_number: int | None) -> Waiter:
        self.waiter = Waiter(self, parts, try_number=try_number, resume=parts.resume)
        return self.waiter

    def execute(self, context: Context) -> dict[str, Any]:
        parts, ti = OperatorParts.of(self), context["ti"]
        waiter = self._waiter(parts, ti.try_number)
        try_number = ti.try_number or 1
        render = self._rendering(parts, context, waiter)
        rendered = self._shown(render(try_number))  # bad input fails here, before any API client
        store = task_state_store(context)  # Airflow >= 3.3: kept across tries
        if (resumed := parts.resume.interrupted_run(self.hook, store, try_number)) is not None:
            render = render.resuming(parts.run.settled(resumed))
            rendered = self._shown(render(try_number))
        spec, job = submission.submit_for_try(
            self.hook,
            rendered,
            render,
            render.identity,
            try_number=try_number,
            reattach=parts.submit.reattach_on_restart,
            api_key=None if parts.run.wandb_api_key_secret else waiter.wandb_hook.api_key,
            on_job=waiter.set_job,
            store=store,
            fit_check=parts.job.fit_checked(rendered[1]),
            task_log=self.log,
        )
        ti.xcom_push(key=XCOM_JOB, value=waiter.job)
        parts.resume.record_run(store, job)  # for the next try, the outcome not yet known
        run = parts.run.publish(ti, spec, job)
        parts.resume.say_resumed(render.resumed, job, ti, run)
        if (status := interpret(job)).terminal:  # only a Completed job is ever reused
            self.log.info("Job %s Completed in an earlier try; not resubmitting", status.name)
            return waiter.finish(WaitResult.from_status(status), context, run)
        if not parts.submit.wait_for_completion:
            return {**(waiter.job or {}), **run}
        waited = self._wait(parts, waiter, store, run)
        if isinstance(waited, VolcanoJobTrigger):
            resumed_with = {"run": run, preview.RENDERED_JOB: self.rendered_job}
            self.defer(trigger=waited, method_name="execute_complete", kwargs=resumed_with)
        return waiter.finish(waited, context, run)

    def _rendering(self, parts: OperatorParts, context: Context, waiter: Waiter) -> TryRendering:
        ti = context["ti"]
        identity = TaskInstanceIdentity(
            ti.dag_id,
            ti.task_id,
            ti.run_id,
            -1 if ti.map_index is None else ti.map_index,  # a worker's: always an int
            deployment=configured_deployment(),
        )
        return TryRendering(  # the namespace is asked last, if at all: no API client before
            parts, context, identity, waiter.wandb_hook, lambda: self.hook.get_namespace()
        )

    def _shown(self, rendered: tuple[Any, dict[str, Any]]) -> tuple[Any, dict[str, Any]]:
        """``rendered``, its job shown in the task log and the Rendered Template view."""
        self.rendered_job = preview.shown(rendered[1], self.log)
        return rendered

    def _wait(
        self, parts: OperatorParts, waiter: Waiter, store: Any, run: Mapping[str, Any]
    ) -> WaitResult | VolcanoJobTrigger:
        """The wait on the submitted job, until ``execution_timeout``; a kill meanwhile is
        recorded for the next try, told by the job gone."""
        timeout = self.execution_timeout
        try:
            return waiter.wait(
                waiter.job or {},
                deferred=parts.wait.deferrable,
                deadline=time.time() + timeout.total_seconds() if timeout else None,
                poll_interval=parts.submit.poll_interval,
                run_id=run[XCOM_RUN_ID],
            )
        except BaseException as exc:
            parts.resume.record_timeout(store, waiter.job, exc)
            raise

    def execute_complete(
        self,
        context: Context,
        event: dict[str, Any],
        run: Mapping[str, Any] | None = None,
        rendered_job: str | None = None,
    ) -> dict[str, Any]:
        """Resume after the trigger fired: report, clean up, and succeed or fail."""
        self.rendered_job = rendered_job  # the Rendered Template view keeps it
        waiter = self._waiter(OperatorParts.of(self), context["ti"].try_number)
        if run is None:  # dag.test() resumes without the deferral's kwargs: ask XCom
            run = pulled_run(context["ti"], self.task_id)
        return waiter.finish(WaitResult.from_event(event), context, dict(run), resumed=True)

    def dry_run(self) -> None:
        """Print the Volcano Job this task would submit, as YAML, and submit nothing (as
        ``KubernetesPodOperator.dry_run``): templated options rendered against the params'
        defaults, the run named ``dry_run``, the connections read as the task would (the W&B
        key only to name its Secret: the job carries a reference, never the key)."""
        print(job_as_yaml(preview.rendered_job(self)))

    def on_kill(self) -> None:
        """Killed while waiting in sync mode: delete the job and its pods, unless it ended."""
        if self.waiter is not None:
            self.waiter.delete(kill=True)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """OpenLineage: the Volcano job, the W&B run, its artifacts (docs/lineage.md)."""
        report = options.build(WandbReport, self, log=self.log)
        if (waiter := self.waiter) is None:  # failed before it waited
            return run_lineage(report, None, {}, None)
        return run_lineage(report, waiter.facts, waiter.run, waiter.summary)

    #: A failed try's: the same facets, as far as the try got.
    get_openlineage_facets_on_failure = get_openlineage_facets_on_complete

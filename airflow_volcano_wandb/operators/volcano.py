"""Submit a Volcano PyTorch job from a W&B Launch queue template, wait for it, report.

A thin Airflow shell over the rooms of docs/architecture.md.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.configuration import conf
from airflow.sdk import Context

from airflow_volcano_wandb.airflow_compat import task_state_store
from airflow_volcano_wandb.hooks.volcano import VolcanoConnectionMixin
from airflow_volcano_wandb.job import deletion, submission
from airflow_volcano_wandb.job.deployment import configured_deployment
from airflow_volcano_wandb.job.job_facts import JobFacts, asset_extra
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.operators.assets import annotate_outlet_events
from airflow_volcano_wandb.operators.job_template import JobTemplateMixin
from airflow_volcano_wandb.operators.pod_logs import PodLogMixin
from airflow_volcano_wandb.operators.restarts import RestartBudgetMixin, templated_seconds
from airflow_volcano_wandb.operators.sync_wait import wait_in_process
from airflow_volcano_wandb.operators.wandb import XCOM_RUN_ID, XCOM_RUN_URL, WandbRunMixin
from airflow_volcano_wandb.triggers.volcano import DEFAULT_WATCH_FAILURE_GRACE, VolcanoJobTrigger
from airflow_volcano_wandb.wait import cleanup, job_report
from airflow_volcano_wandb.wait.cleanup import OnFinishAction
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wandb import wandb_run

XCOM_JOB = "volcano_job"


class VolcanoPyTorchJobOperator(
    VolcanoConnectionMixin, JobTemplateMixin, WandbRunMixin, PodLogMixin, RestartBudgetMixin
):
    """Run a multi-node PyTorch job on Volcano from a W&B Launch queue template.

    The job comes from :class:`.job_template.JobTemplateMixin`, its W&B run from
    :class:`.wandb_run.WandbRunMixin` (and what is reported to it from ``WandbReportMixin``),
    the pod logs it shows from :class:`.pod_logs.PodLogMixin`, its restart budget and stall
    timeout from :class:`.restarts.RestartBudgetMixin`: their parameters are documented there.

    One task instance owns at most one live job, whatever its tries: the job carries labels
    naming the task instance, and a retry or a restarted worker finds it. A job still running
    is reattached; a completed one counts as this task's success without resubmitting; a
    failed, aborted or terminated one is deleted and submitted again.

    :param kubernetes_conn_id: the cncf.kubernetes ``kubernetes`` connection.
    :param config_file: a kubeconfig path, overriding the connection's.
    :param cluster_context: a kubeconfig context, overriding the connection's.
    :param in_cluster: use the in-cluster service account.
    :param wait_for_completion: wait for the job to end (else return once submitted, for
        ``VolcanoJobSensor``).
    :param deferrable: wait in the triggerer, freeing the worker slot.
    :param poll_interval: seconds between timeout checks; the job's state arrives by watch.
    :param pending_timeout: seconds until every rank must be placed and running; else the
        task fails with Volcano's reason and the job is deleted.
    :param watch_failure_grace: seconds the job may stay unreadable (watch and reads failing)
        before the task fails; the job is never deleted for that: the next try reattaches.
    :param on_finish_action: ``delete_succeeded`` (default: a failed job stays for
        inspection until a retry replaces it), ``delete`` or ``keep``.
    :param reattach_on_restart: reattach to a live job of this task instance; if False it is
        deleted and submitted again.
    """

    template_fields: Sequence[str] = (
        *JobTemplateMixin.template_fields,
        *WandbRunMixin.template_fields,
        "pending_timeout",
        "on_finish_action",
    )
    ui_color = "#ffd166"

    def __init__(
        self,
        *,
        kubernetes_conn_id: str | None = "kubernetes_default",
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        wait_for_completion: bool = True,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        poll_interval: float = 10.0,
        pending_timeout: float | str | None = None,
        watch_failure_grace: float = DEFAULT_WATCH_FAILURE_GRACE,
        on_finish_action: OnFinishAction = "delete_succeeded",
        reattach_on_restart: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if "{{" not in str(on_finish_action):
            cleanup.check_on_finish_action(on_finish_action)
        self.kubernetes_conn_id, self.config_file = kubernetes_conn_id, config_file
        self.cluster_context, self.in_cluster = cluster_context, in_cluster
        self.wait_for_completion, self.deferrable = wait_for_completion, deferrable
        self.poll_interval, self.pending_timeout = poll_interval, pending_timeout
        self.watch_failure_grace = watch_failure_grace
        self.on_finish_action, self.reattach_on_restart = on_finish_action, reattach_on_restart
        #: The job this try submitted or reattached to, as soon as it exists (for on_kill).
        self._job: dict[str, str] | None = None
        self._try_number: int | None = None

    def execute(self, context: Context) -> dict[str, Any]:
        ti = context["ti"]
        identity = TaskInstanceIdentity(
            ti.dag_id, ti.task_id, ti.run_id, ti.map_index, deployment=configured_deployment()
        )
        self._try_number = ti.try_number
        cleanup.check_on_finish_action(self.on_finish_action)
        wandb_hook = self.wandb_hook

        def render(intent: int) -> tuple[wandb_run.WandbRunSpec, dict[str, Any]]:
            spec = self.wandb_spec(context, identity, wandb_hook, intent)
            labels = identity.job_labels(intent, spec.run_id)
            put = {"annotations": identity.annotations(ti.try_number), "labels": labels}
            body = self.render(spec, wandb_hook, default_namespace=self.hook.get_namespace, **put)
            if (name := self.resumed_job_name(body, intent)) is None:
                return spec, body
            return spec, self.render(
                spec, wandb_hook, default_namespace=self.hook.get_namespace, name=name, **put
            )

        rendered = render(self._try_number or 1)  # bad input fails here, before any API client
        store = task_state_store(context)  # Airflow >= 3.3: kept across tries
        if self.resume_interrupted_run(self.hook, store, self._try_number or 1):
            rendered = render(self._try_number or 1)  # the earlier run's id
        spec, job = submission.submit_for_try(
            self.hook,
            rendered,
            render,
            identity,
            try_number=self._try_number or 1,
            reattach=self.reattach_on_restart,
            api_key=None if self.wandb_api_key_secret else wandb_hook.api_key,
            on_job=self._known,
            store=store,
            fit_check=self.fit_checked(rendered[1]),
            task_log=self.log,
        )
        ti.xcom_push(key=XCOM_JOB, value=self._job)
        run = self.publish_run(ti, spec, job, store)

        status = interpret(job)
        if status.terminal:  # only a Completed job is ever reused
            self.log.info("Job %s Completed in an earlier try; not resubmitting", status.name)
            return self._report(context, WaitResult.from_status(status), run)
        if not self.wait_for_completion:
            return {**self._job, **run}
        asked = self.wandb_progress_kwargs(run[XCOM_RUN_ID], self.stall_timeout, wandb_hook)
        trigger = self._trigger([wandb_hook.api_key], self.deferrable, asked)
        if self.deferrable:
            self.defer(trigger=trigger, method_name="execute_complete", kwargs={"run": run})
        try:
            result = wait_in_process(self.hook, trigger, job, self.log)
        except BaseException as exc:
            # A kill or any failure while waiting here: nobody would wait on the job any more.
            self._delete_job()
            self.record_timeout(store, self._job, exc)  # a kill is told by the job being gone
            raise
        return self._report(context, result, run)

    def execute_complete(
        self, context: Context, event: dict[str, Any], run: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Resume after the trigger fired: report, clean up, and succeed or fail."""
        self._try_number = context["ti"].try_number
        if run is None:  # dag.test() resumes without the deferral's kwargs: ask XCom
            run = self.pulled_run(context["ti"])
        return self._report(context, WaitResult.from_event(event), dict(run))

    def _trigger(
        self, masked: Sequence[str | None], deferred: bool, wandb_run: Mapping | None = None
    ) -> VolcanoJobTrigger:
        """The wait, ``deferred`` or here, masking ``masked``, asking ``wandb_run`` on a stall."""
        assert self._job is not None
        timeout = self.execution_timeout
        deadline = time.time() + timeout.total_seconds() if timeout is not None else None
        return VolcanoJobTrigger(
            job_name=self._job["name"],
            namespace=self._job["namespace"],
            job_uid=self._job["uid"],
            **self.connection_kwargs(),
            pending_timeout=templated_seconds(self.pending_timeout, "pending_timeout"),
            deadline=deadline,
            poll_interval=self.poll_interval,
            watch_failure_grace=self.watch_failure_grace,
            try_number=self._try_number,
            **self.master_log_kwargs(masked, follow=self.follow_master_log or not deferred),
            deferred_at=time.time() if deferred else None,
            **self.limit_kwargs(),
            **(wandb_run or {}),
        )

    def _report(
        self, context: Context, result: WaitResult, run: Mapping[str, Any]
    ) -> dict[str, Any]:
        """Clean up as ``on_finish_action`` says, tell what happened, succeed or fail."""
        self._job = result.job_ref()
        self._facts, self._run = JobFacts.from_job({"metadata": self._job}), dict(run)
        # A resumed task is a new process: pod logs shown below may echo the key.
        self.wandb_hook.mask_api_key()
        hook = self.hook
        job_report.mark_reported(hook, result, context["ti"].try_number, self.log)
        deletes = cleanup.deletes_job(result.outcome, self.on_finish_action)
        if result.outcome.succeeded:
            self.log.info("%s", result.message)
            job = job_report.fetch_finished_job(hook, result, self.log)
            usage = job_report.log_gpu_seconds(hook, job, self.log)  # before a delete
            context["ti"].xcom_push(key=job_report.XCOM_GPU_SECONDS, value=usage)
            run = {**run, **self.say_resumed_step(hook, job, context["ti"], run)}
            if job:
                self._facts = JobFacts.from_job(job)
                if self.deferrable:
                    job_report.log_master_tail(hook, job, self.log_lines, self.log)
            self.end_run(context, run, result, None)  # before a delete: the next try is told
            if deletes:
                self._delete_job()
            summary = self._summary = self.push_summary(context["ti"], run)
            if self.outlets:  # the record travels with the asset event (docs/assets.md)
                annotate_outlet_events(
                    context, self.outlets, asset_extra(self._facts, run, summary, usage)
                )
            summary_part = {"wandb_summary": summary} if summary is not None else {}
            return {**result.job_ref(), **run, **summary_part, "phase": result.phase}
        error = job_report.report_failure(
            hook,
            result,
            delete_job=self._delete_job if deletes else None,
            log_lines=self.log_lines,
            task_log=self.log,
            run_url=run.get(XCOM_RUN_URL),
        )
        self.end_run(context, run, result, error)
        raise error  # its class names the cause, for retry policies

    def _known(self, job: dict[str, str]) -> None:
        self._job = job

    def _delete_job(self, *, kill: bool = False) -> None:
        if self._job:
            deletion.delete_if_owned(self.hook, self._job, self._try_number, self.log, kill=kill)

    def on_kill(self) -> None:
        """Killed while waiting in sync mode: delete the job and its pods, unless it ended."""
        self._delete_job(kill=True)

"""Wait on a Volcano job submitted earlier (the operator with ``wait_for_completion=False``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, Context

from airflow_volcano_wandb.airflow_compat import (
    AirflowSensorTimeout,
    AirflowTaskTimeout,
)
from airflow_volcano_wandb.exceptions import ApiserverUnreachableError
from airflow_volcano_wandb.hooks.volcano import VolcanoConnectionMixin
from airflow_volcano_wandb.job import deletion
from airflow_volcano_wandb.job.job_facts import JobFacts, asset_extra
from airflow_volcano_wandb.job.job_status import job_ref
from airflow_volcano_wandb.job.ownership import wandb_run_of
from airflow_volcano_wandb.links.wandb import WandbRunLink
from airflow_volcano_wandb.operators.assets import annotate_outlet_events
from airflow_volcano_wandb.operators.pod_logs import PodLogMixin, masked_digests
from airflow_volcano_wandb.operators.restarts import RestartBudgetMixin
from airflow_volcano_wandb.operators.wandb import (
    XCOM_RUN_ID,
    XCOM_RUN_URL,
    WandbReportMixin,
)
from airflow_volcano_wandb.triggers.volcano import (
    DEFAULT_WATCH_FAILURE_GRACE,
    VolcanoJobTrigger,
    pod_check_interval,
)
from airflow_volcano_wandb.wait import cleanup, job_report, step_io
from airflow_volcano_wandb.wait.cleanup import OnFinishAction
from airflow_volcano_wandb.wait.judge import WaitTarget, judge
from airflow_volcano_wandb.wait.outcome import Outcome, WaitResult
from airflow_volcano_wandb.wait.stall import WandbRunRef
from airflow_volcano_wandb.wait.step import WaitMemory
from airflow_volcano_wandb.wait.wandb_progress import WandbProgress
from airflow_volcano_wandb.wandb import wandb_urls


class VolcanoJobSensor(
    VolcanoConnectionMixin, PodLogMixin, RestartBudgetMixin, WandbReportMixin, BaseSensorOperator
):
    """Succeed when the Volcano job is ``Completed``; fail, with the reason, when it fails.

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

    :param job_name: the job, e.g. ``"{{ ti.xcom_pull('submit', key='volcano_job')['name'] }}"``.
    :param namespace: its namespace; else the connection's, else ``default``.
    :param job_uid: the submission to wait on (e.g. the ``volcano_job`` XCom's ``uid``); a
        job of the same name but another uid counts as this one deleted.
    :param kubernetes_conn_id: the cncf.kubernetes ``kubernetes`` connection.
    :param deferrable: wait in the triggerer (a watch) instead of poking.
    :param pending_timeout: seconds until every rank must be placed and running.
    :param on_finish_action: ``delete_succeeded`` (default), ``delete`` or ``keep``, as for
        the operator; a pending timeout, a crash loop and the sensor's timeout always delete.
    :param delete_on_kill: delete the job when the task is killed, cleared or marked failed.
    :param watch_failure_grace: seconds the job may stay unreadable (the watch when deferred,
        the pokes otherwise: lost permission, an unreachable apiserver) before the sensor
        fails, leaving the job untouched. In ``reschedule`` mode each poke is a new process:
        an unreadable job is poked again until the sensor's ``timeout``.
    :param wandb_run_id: the W&B run the job writes to; by default the one the operator
        recorded on the job (its ``wandb-run-id`` label). The sensor reports to it as the
        operator's own wait does: the task and its outcome are written into the run, the
        ``wandb_summary_keys`` are read back into XCom ``wandb_summary`` and the asset events
        of ``outlets``, and XComs ``wandb_run_id``/``wandb_run_url`` give the sensor its
        "W&B Run" button. Its steps, when it is online, count as progress for
        ``stall_timeout``.

    ``wandb_conn_id`` (whose API key the pods hold: it is masked in this task's log, which
    shows pod logs), ``wandb_entity``, ``wandb_project``, ``wandb_mode`` and
    ``wandb_summary_keys`` are ``WandbReportMixin``'s, as for the operator.
    ``follow_master_log``, ``master_log_max_lines``, ``master_log_max_bytes`` and
    ``log_lines`` are ``PodLogMixin``'s, as for the operator; the sensor shows pod log tails
    on failure only. ``max_container_restarts`` and ``stall_timeout`` are
    ``RestartBudgetMixin``'s, as for the operator: each poke (or the trigger) reads a
    running job's pods for their restarts, and probes its master's log for a stall when one
    is due.
    """

    template_fields: Sequence[str] = (
        "job_name",
        "namespace",
        "job_uid",
        "wandb_run_id",
        *WandbReportMixin.template_fields,
    )
    operator_extra_links = (WandbRunLink(),)

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        job_uid: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        pending_timeout: float | None = None,
        on_finish_action: OnFinishAction = "delete_succeeded",
        delete_on_kill: bool = True,
        watch_failure_grace: float = DEFAULT_WATCH_FAILURE_GRACE,
        wandb_run_id: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        cleanup.check_on_finish_action(on_finish_action)
        self.job_name, self.namespace, self.job_uid = job_name, namespace, job_uid
        self.kubernetes_conn_id, self.config_file = kubernetes_conn_id, config_file
        self.cluster_context, self.in_cluster = cluster_context, in_cluster
        self.deferrable, self.pending_timeout = deferrable, pending_timeout
        self.on_finish_action, self.delete_on_kill = on_finish_action, delete_on_kill
        self.wandb_run_id, self.watch_failure_grace = wandb_run_id, watch_failure_grace
        self._failing_since: float | None = None
        self._memory = WaitMemory()  # of this process: each rescheduled poke starts afresh
        #: The run a poke's stall probe asks (``False``: none; ``None``: not known yet).
        self._wandb: WandbProgress | bool | None = None
        self._job: dict[str, str] | None = None

    def _target(self) -> WaitTarget:
        deadline = time.time() + self.timeout if self.timeout and self.deferrable else None
        return WaitTarget(
            name=self.job_name,
            namespace=self.namespace or self.hook.get_namespace() or "default",
            uid=self.job_uid or None,
            pending_timeout=self.pending_timeout,
            deadline=deadline,
            **self.limit_kwargs(),
            pod_check_interval=pod_check_interval(),
        )

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
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
        masked = [self.wandb_hook.mask_api_key()] if self.follow_master_log else []
        return VolcanoJobTrigger(
            job_name=target.name,
            namespace=target.namespace,
            job_uid=target.uid or (self._job or {}).get("uid"),
            **self.connection_kwargs(),
            pending_timeout=self.pending_timeout,
            deadline=target.deadline,
            poll_interval=self.poke_interval,
            delete_on_kill=self.delete_on_kill,
            watch_failure_grace=self.watch_failure_grace,
            **self.master_log_kwargs(masked),
            deferred_at=time.time(),
            **self.limit_kwargs(),
            **self._wandb_progress_kwargs(job),
        )

    def _wandb_progress_kwargs(self, job: dict[str, Any] | None) -> dict[str, Any]:
        """The online W&B run a stall probe asks (``WandbReportMixin.wandb_progress_kwargs``):
        ``wandb_run_id``, else the one the job names."""
        run_id = self.wandb_run_id or (wandb_run_of(job) if job else None)
        return self.wandb_progress_kwargs(run_id, self.stall_timeout)

    @contextlib.contextmanager
    def _master_log_followed(self) -> Iterator[None]:
        """In ``poke`` mode with ``follow_master_log``: the master's log, while poking."""
        if not self.follow_master_log or self.mode != "poke":
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

        key = self.wandb_hook.mask_api_key()  # masked by this process's masker, and the follow
        follower = MasterLogThread(
            lambda: AsyncVolcanoHook(**self.connection_kwargs()),
            target.name,
            target.namespace,
            self.log,
            self.master_log_max_lines,
            self.master_log_max_bytes,
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
        now = time.monotonic()
        self._failing_since = self._failing_since or now
        where = f"Volcano job {target.namespace}/{target.name}"
        if now - self._failing_since < self.watch_failure_grace:
            self.log.warning("Could not read %s (%s); poking again", where, exc)
            return False
        raise ApiserverUnreachableError(
            f"Could not read {where} for {self.watch_failure_grace:g}s: {exc}. The job was "
            "left untouched; the next try waits on it again."
        ) from exc

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's verdict into the task's outcome."""
        return self._report(WaitResult.from_event(event), context)

    def _remember(self, job: dict[str, Any] | None) -> None:
        """Pin the submission first seen, so a job recreated under its name is not it."""
        if job is None or self._job is not None:
            return
        if not self.job_uid or job["metadata"].get("uid") == self.job_uid:
            self._job = job_ref(job)
            self.job_uid = self.job_uid or self._job["uid"]

    def _report(self, result: WaitResult, context: Context) -> dict[str, Any]:
        """Clean up as ``on_finish_action`` says, report to the W&B run, succeed or fail."""
        # The failure report shows pod logs, which may echo the key the pods were given.
        self.wandb_hook.mask_api_key()
        if result.uid:
            self._job = result.job_ref()
        job_report.mark_reported(self.hook, result, context["ti"].try_number, self.log)
        deletes = cleanup.deletes_job(result.outcome, self.on_finish_action)
        job = job_report.fetch_finished_job(self.hook, result, self.log)
        run = self._wandb_run(job, context)
        if result.outcome.succeeded:
            self.log.info("%s", result.message)
            usage = job_report.log_gpu_seconds(self.hook, job, self.log)  # before a delete
            context["ti"].xcom_push(key=job_report.XCOM_GPU_SECONDS, value=usage)
            if deletes:
                self._delete_job()
            summary = self.push_summary(context["ti"], run) if run else None
            if run:
                self.link_back(context, run, "success")
            if self.outlets:  # the same record as the operator's (docs/assets.md)
                facts = JobFacts.from_job(job or {"metadata": result.job_ref()})
                annotate_outlet_events(
                    context, self.outlets, asset_extra(facts, run or {}, summary, usage)
                )
            summary_part = {"wandb_summary": summary} if summary is not None else {}
            return {**result.job_ref(), **(run or {}), **summary_part, "phase": result.phase}
        error = job_report.report_failure(
            self.hook,
            result,
            delete_job=self._delete_job if deletes else None,
            log_lines=self.log_lines,
            task_log=self.log,
            run_url=(run or {}).get(XCOM_RUN_URL),
        )
        if run:
            self.link_back(context, run, result.outcome.value)
        if result.outcome is Outcome.TIMEOUT:  # a sensor's timeout is never retried
            raise AirflowSensorTimeout(str(error)) from error
        raise error

    def _wandb_run(self, job: dict[str, Any] | None, context: Context) -> dict[str, Any] | None:
        """The W&B run the job wrote to (pushed to XCom for the button), if it names one."""
        run_id = self.wandb_run_id or (wandb_run_of(job) if job else None)
        if not run_id:
            return None
        hook = self.best_effort_wandb_hook
        entity, project = self.wandb_entity or hook.entity, self.wandb_project or hook.project
        url = (
            wandb_urls.run_url(hook.base_url, entity, project, run_id)
            if entity and project
            else None
        )
        run = {XCOM_RUN_ID: run_id, XCOM_RUN_URL: url}
        for key, value in run.items():
            context["ti"].xcom_push(key=key, value=value)
        return run

    def _delete_job(self, *, kill: bool = False) -> None:
        if self._job:
            deletion.delete_if_owned(self.hook, self._job, None, self.log, kill=kill)

    def on_kill(self) -> None:
        """Killed while poking: the job must not run on unwatched (one that ended is left)."""
        if self.delete_on_kill:
            self._delete_job(kill=True)

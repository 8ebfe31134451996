"""Wait on a Volcano job submitted earlier (the operator with ``wait_for_completion=False``)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from datetime import timedelta
from typing import Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, Context

from airflow_volcano_wandb import cleanup, job_report
from airflow_volcano_wandb.airflow_compat import (
    AirflowSensorTimeout,
    AirflowTaskTimeout,
)
from airflow_volcano_wandb.cleanup import OnFinishAction
from airflow_volcano_wandb.exceptions import ApiserverUnreachableError
from airflow_volcano_wandb.hooks.volcano import VolcanoConnectionMixin
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.job_status import job_ref
from airflow_volcano_wandb.judge import (
    WaitTarget,
    counts_restarts,
    gang_is_whole,
    gang_whole_mark,
    judge,
    needs_gang_whole_mark,
    progress_line,
)
from airflow_volcano_wandb.log_follower import MasterLogFollower
from airflow_volcano_wandb.operators.pod_logs import PodLogMixin
from airflow_volcano_wandb.operators.restarts import RestartBudgetMixin
from airflow_volcano_wandb.outcome import Outcome, WaitResult
from airflow_volcano_wandb.triggers.volcano import (
    DEFAULT_WATCH_FAILURE_GRACE,
    VolcanoJobTrigger,
)


class VolcanoJobSensor(VolcanoConnectionMixin, PodLogMixin, RestartBudgetMixin, BaseSensorOperator):
    """Succeed when the Volcano job is ``Completed``; fail, with the reason, when it fails.

    The same judgement (``judge.py``), diagnostics and cleanup rule as
    ``VolcanoPyTorchJobOperator``: ``Failed``, ``Terminated``, ``Aborted`` and a deleted job
    fail the sensor at once; a gang not wholly placed within ``pending_timeout`` fails it with
    Volcano's unschedulable reason; containers restarting in place past
    ``max_container_restarts`` fail it with ``TrainerCrashLoopError``. The job is the
    sensor's to clean up: by default it is deleted after success, on a pending timeout, a
    crash loop, the sensor's timeout and when the task is killed, so nothing is left running
    or holding the API key.

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
    :param wandb_conn_id: the ``wandb`` connection whose API key the job's pods hold: it is
        masked in this task's log, which shows pod logs (``None``: none to mask).

    ``follow_master_log``, ``master_log_max_lines``, ``master_log_max_bytes`` and
    ``log_lines`` are ``PodLogMixin``'s, as for the operator; the sensor shows pod log tails
    on failure only. ``max_container_restarts`` is ``RestartBudgetMixin``'s, as for the
    operator: each poke (or the trigger) reads a running job's pods for their restarts.
    """

    template_fields: Sequence[str] = ("job_name", "namespace", "job_uid")

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
        wandb_conn_id: str | None = "wandb_default",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        cleanup.check_on_finish_action(on_finish_action)
        self.job_name, self.namespace, self.job_uid = job_name, namespace, job_uid
        self.kubernetes_conn_id, self.config_file = kubernetes_conn_id, config_file
        self.cluster_context, self.in_cluster = cluster_context, in_cluster
        self.deferrable, self.pending_timeout = deferrable, pending_timeout
        self.on_finish_action, self.delete_on_kill = on_finish_action, delete_on_kill
        self.wandb_conn_id, self.watch_failure_grace = wandb_conn_id, watch_failure_grace
        self._failing_since: float | None = None
        self._last_progress = ""
        self._gang_seen_whole = False
        self._job: dict[str, str] | None = None

    def _target(self) -> WaitTarget:
        deadline = time.time() + self.timeout if self.timeout and self.deferrable else None
        return WaitTarget(
            name=self.job_name,
            namespace=self.namespace or self.hook.get_namespace() or "default",
            uid=self.job_uid or None,
            pending_timeout=self.pending_timeout,
            deadline=deadline,
            max_container_restarts=self.max_container_restarts,
        )

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            try:
                with self._master_log_followed():
                    return super().execute(context)
            except (AirflowSensorTimeout, AirflowTaskTimeout):
                ended = self._job and job_report.ended_meanwhile(self.hook, self._job, self.log)
                if ended:  # it ended while the last pokes could not see it
                    return self._report(ended, context["ti"].try_number)
                self._delete_job()  # nobody waits on it any more
                raise
        target = self._target()
        job = self.hook.get_job(target.name, target.namespace)
        self._remember(job)
        result = judge(job, target, time.time())
        if result is not None:
            return self._report(result, context["ti"].try_number)
        self.defer(
            trigger=self._trigger(target),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def _trigger(self, target: WaitTarget) -> VolcanoJobTrigger:
        """The wait in the triggerer; the key of ``wandb_conn_id`` is masked in the log it
        follows."""
        masked = [WandbHook(self.wandb_conn_id).mask_api_key()] if self.follow_master_log else []
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
            max_container_restarts=self.max_container_restarts,
        )

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
        WandbHook(self.wandb_conn_id).mask_api_key()  # the follower masks what this process knows
        follower = MasterLogFollower.for_job(
            self.hook, job, self.log, self.master_log_max_lines, self.master_log_max_bytes
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
        if job is not None and (not target.uid or job["metadata"].get("uid") == target.uid):
            self._gang_seen_whole = self._gang_seen_whole or gang_is_whole(job)
            self._mark_gang_whole(job)
            progress = progress_line(job, gang_seen_whole=self._gang_seen_whole)
            if progress != self._last_progress:
                self._last_progress = progress
                self.log.info("%s", progress)
        result = judge(job, target, time.time(), gang_seen_whole=self._gang_seen_whole)
        if result is None and counts_restarts(job, target):
            result = self._judge_restarts(job, target)
        if result is None:
            return False
        self._report(result, context["ti"].try_number)
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

    def _mark_gang_whole(self, job: dict[str, Any]) -> None:
        """Record on the job, once, that its gang was whole (see ``judge.py``): a later poke
        in another process, or a retry, then never takes a lost rank for a gang never placed."""
        if not needs_gang_whole_mark(job):
            return
        try:
            meta = job["metadata"]
            self.hook.set_job_annotations(
                meta["name"], meta["namespace"], meta["uid"], gang_whole_mark(time.time())
            )
        except Exception as exc:  # this process remembers; a later poke tries again
            self.log.warning("Could not record the whole gang on the job: %s", exc)

    def _judge_restarts(self, job: dict[str, Any], target: WaitTarget) -> WaitResult | None:
        """A crash loop, as ``restart_check.verdict`` finds one: judged with the running job's
        pods, then again on a fresh GET of the job and of its pods, since it deletes the job;
        ``None`` otherwise and when they cannot be read."""
        try:
            pods = self.hook.list_job_pods(target.name, target.namespace)
            result = judge(
                job, target, time.time(), gang_seen_whole=self._gang_seen_whole, pods=pods
            )
            if result is None or result.outcome is not Outcome.CRASH_LOOP:
                return None  # anything else is the next poke's to say
            job = self.hook.get_job(target.name, target.namespace)
            pods = self.hook.list_job_pods(target.name, target.namespace)
        except Exception as exc:  # the budget never fails a poke on its own reads
            self.log.warning("Could not read the job's pods for their restarts (%s)", exc)
            return None
        return judge(job, target, time.time(), gang_seen_whole=self._gang_seen_whole, pods=pods)

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's verdict into the task's outcome."""
        return self._report(WaitResult.from_event(event), context["ti"].try_number)

    def _remember(self, job: dict[str, Any] | None) -> None:
        """Pin the submission first seen, so a job recreated under its name is not it."""
        if job is None or self._job is not None:
            return
        if not self.job_uid or job["metadata"].get("uid") == self.job_uid:
            self._job = job_ref(job)
            self.job_uid = self.job_uid or self._job["uid"]

    def _report(self, result: WaitResult, try_number: int) -> dict[str, Any]:
        # The failure report shows pod logs, which may echo the key the pods were given.
        WandbHook(self.wandb_conn_id).mask_api_key()
        if result.uid:
            self._job = result.job_ref()
        job_report.mark_reported(self.hook, result, try_number, self.log)
        deletes = cleanup.deletes_job(result.outcome, self.on_finish_action)
        if result.outcome.succeeded:
            self.log.info("%s", result.message)
            if deletes:
                self._delete_job()
            return {**result.job_ref(), "phase": result.phase}
        error = job_report.report_failure(
            self.hook,
            result,
            delete_job=self._delete_job if deletes else None,
            log_lines=self.log_lines,
            task_log=self.log,
        )
        if result.outcome is Outcome.TIMEOUT:  # a sensor's timeout is never retried
            raise AirflowSensorTimeout(str(error)) from error
        raise error

    def _delete_job(self) -> None:
        if self._job:
            self.hook.delete_job_if_owned(self._job, None, self.log)

    def on_kill(self) -> None:
        """Killed while poking: the job must not run on unwatched."""
        if self.delete_on_kill:
            self._delete_job()

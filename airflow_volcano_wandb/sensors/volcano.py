"""Wait on a Volcano job submitted earlier (the operator with ``wait_for_completion=False``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from airflow.configuration import conf
from airflow.sdk import BaseSensorOperator, Context
from airflow.sdk.exceptions import AirflowException

from airflow_volcano_wandb import job_status
from airflow_volcano_wandb.hooks.volcano import VolcanoConnectionMixin
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger


class VolcanoJobSensor(VolcanoConnectionMixin, BaseSensorOperator):
    """Succeed when the Volcano job is ``Completed``; fail, with the reason, when it fails.

    The same status reading and diagnostics as ``VolcanoPyTorchJobOperator``: ``Failed``,
    ``Terminated``, ``Aborted`` and a deleted job fail the sensor at once (no waiting out the
    timeout); ``Pending`` longer than ``pending_timeout`` fails it with Volcano's
    unschedulable reason.

    :param job_name: the job, e.g. ``"{{ ti.xcom_pull('submit', key='volcano_job')['name'] }}"``.
    :param namespace: its namespace; else the connection's, else ``default``.
    :param kubernetes_conn_id: the cncf.kubernetes ``kubernetes`` connection.
    :param deferrable: wait in the triggerer (a watch) instead of poking.
    :param pending_timeout: seconds the job may stay ``Pending``.
    :param delete_on_failure: delete a failed job once its diagnostics are logged.
    :param log_lines: pod log lines to show on failure.
    """

    template_fields: Sequence[str] = ("job_name", "namespace")

    def __init__(
        self,
        *,
        job_name: str,
        namespace: str | None = None,
        kubernetes_conn_id: str | None = "kubernetes_default",
        config_file: str | None = None,
        cluster_context: str | None = None,
        in_cluster: bool | None = None,
        deferrable: bool = conf.getboolean("operators", "default_deferrable", fallback=False),
        pending_timeout: float | None = None,
        delete_on_failure: bool = False,
        log_lines: int = 50,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.job_name = job_name
        self.namespace = namespace
        self.kubernetes_conn_id = kubernetes_conn_id
        self.config_file = config_file
        self.cluster_context = cluster_context
        self.in_cluster = in_cluster
        self.deferrable = deferrable
        self.pending_timeout = pending_timeout
        self.delete_on_failure = delete_on_failure
        self.log_lines = log_lines
        self._last_progress = ""

    def _namespace(self) -> str:
        return self.namespace or self.hook.get_namespace() or "default"

    def execute(self, context: Context) -> Any:
        if not self.deferrable:
            return super().execute(context)
        namespace = self._namespace()
        job = self.hook.get_job(self.job_name, namespace)
        status = job_status.interpret(job, name=self.job_name, namespace=namespace)
        if status.terminal:
            return self.execute_complete(context, status.as_event())
        deadline = time.time() + self.timeout if self.timeout else None
        self.defer(
            trigger=VolcanoJobTrigger(
                job_name=self.job_name,
                namespace=namespace,
                job_uid=status.uid,
                **self.connection_kwargs(),
                pending_timeout=self.pending_timeout,
                deadline=deadline,
                poll_interval=self.poke_interval,
                # The sensor did not submit the job; killing the waiter leaves it alone.
                delete_on_kill=False,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout) if self.timeout else None,
        )

    def poke(self, context: Context) -> bool:
        namespace = self._namespace()
        job = self.hook.get_job(self.job_name, namespace)
        status = job_status.interpret(job, name=self.job_name, namespace=namespace)
        if status.progress() != self._last_progress and job is not None:
            self._last_progress = status.progress()
            self.log.info("%s", self._last_progress)
        if status.terminal:
            self.execute_complete(context, status.as_event())
            return True
        pending = status.pending_seconds(job, time.time())
        if (
            self.pending_timeout is not None
            and pending is not None
            and (pending >= self.pending_timeout)
        ):
            self.execute_complete(
                context,
                status.as_event(
                    "pending_timeout",
                    f"Volcano job {namespace}/{self.job_name} stayed Pending longer than "
                    f"pending_timeout={self.pending_timeout:g}s",
                ),
            )
        return False

    def execute_complete(self, context: Context, event: dict[str, Any]) -> dict[str, Any]:
        """Turn the trigger's (or a poke's) verdict into the task's outcome."""
        if event["status"] == "succeeded":
            self.log.info("%s", event["message"])
            return {k: event[k] for k in ("name", "namespace", "uid", "phase")}
        hook = self.hook
        message = hook.explain_end(event, self.log_lines, self.log)
        if self.delete_on_failure:
            hook.delete_job(event["name"], event["namespace"], uid=event["uid"])
        raise AirflowException(message)

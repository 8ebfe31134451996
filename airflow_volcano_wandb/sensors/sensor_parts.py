"""The parts ``VolcanoJobSensor`` is made of (shared with the operator where they mean the
same), and its own options: which job it waits on, and what stays of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow.configuration import conf

from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.limits import RunLimits
from airflow_volcano_wandb.parts.log_follow import LogFollow
from airflow_volcano_wandb.parts.options import REQUIRED, build, option, options_of
from airflow_volcano_wandb.parts.wandb_report import WandbReport
from airflow_volcano_wandb.triggers.volcano import DEFAULT_WATCH_FAILURE_GRACE
from airflow_volcano_wandb.wait import cleanup
from airflow_volcano_wandb.wait.cleanup import OnFinishAction


@dataclass(frozen=True, kw_only=True)
class SensedJob:
    """The job the sensor waits on, how, and what stays of it."""

    job_name: str = option(
        REQUIRED,
        """the job, e.g. ``"{{ ti.xcom_pull('submit', key='volcano_job')['name'] }}"``.""",
        templated=True,
    )
    namespace: str | None = option(
        None, "its namespace; else the connection's, else ``default``.", templated=True
    )
    job_uid: str | None = option(
        None,
        """the submission to wait on (e.g. the ``volcano_job`` XCom's ``uid``); a job of the
        same name but another uid counts as this one deleted.""",
        templated=True,
    )
    deferrable: bool = option(
        conf.getboolean("operators", "default_deferrable", fallback=False),
        "wait in the triggerer (a watch) instead of poking.",
    )
    pending_timeout: float | None = option(
        None, "seconds until every rank must be placed and running."
    )
    on_finish_action: OnFinishAction = option(
        "delete_succeeded",
        """``delete_succeeded`` (default), ``delete`` or ``keep``, as for the operator; a
        pending timeout, a crash loop and the sensor's timeout always delete.""",
        check=cleanup.check_on_finish_action,
    )
    delete_on_kill: bool = option(
        True, "delete the job when the task is killed, cleared or marked failed."
    )
    watch_failure_grace: float = option(
        DEFAULT_WATCH_FAILURE_GRACE,
        """seconds the job may stay unreadable (the watch when deferred, the pokes otherwise:
        lost permission, an unreachable apiserver) before the sensor fails, leaving the job
        untouched. In ``reschedule`` mode each poke is a new process: an unreadable job is
        poked again until the sensor's ``timeout``.""",
    )
    wandb_run_id: str | None = option(
        None,
        """the W&B run the job writes to; by default the one the operator recorded on the job
        (its ``wandb-run-id`` label). The sensor reports to it as the operator's own wait
        does: the task and its outcome are written into the run, the ``wandb_summary_keys``
        are read back into XCom ``wandb_summary`` and the asset events of ``outlets``, and
        XComs ``wandb_run_id``/``wandb_run_url`` give the sensor its "W&B Run" button. Its
        steps, when it is online, count as progress for ``stall_timeout``.""",
        templated=True,
    )


@dataclass(frozen=True)
class SensorParts:
    """Everything the sensor knows, typed, once its options are rendered."""

    job: SensedJob
    connection: Connection
    report: WandbReport
    logs: LogFollow
    limits: RunLimits

    @classmethod
    def of(cls, sensor: Any) -> SensorParts:
        return cls(
            job=build(SensedJob, sensor),
            connection=build(Connection, sensor),
            report=build(WandbReport, sensor, log=sensor.log),
            logs=build(LogFollow, sensor),
            limits=build(RunLimits, sensor),
        )


#: The sensor's options, part by part (the order of its docstring).
OPTIONS = options_of(SensedJob, WandbReport, LogFollow, RunLimits, Connection)

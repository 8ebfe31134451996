"""What the sensor is made of: the job it waits on (its own options), the parts it shares
with the operator, typed, once its options are rendered, and what its pokes remember."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.exceptions import ApiserverUnreachableError
from airflow_volcano_wandb.parts.connection import Connection
from airflow_volcano_wandb.parts.job_wait import JobWait
from airflow_volcano_wandb.parts.limits import RunLimits
from airflow_volcano_wandb.parts.log_follow import LogFollow
from airflow_volcano_wandb.parts.options import REQUIRED, build, option, options_of
from airflow_volcano_wandb.parts.wandb_report import WandbReport
from airflow_volcano_wandb.wait import step_io
from airflow_volcano_wandb.wait.judge import JobTarget, WandbRunRef
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.step import StepMemory
from airflow_volcano_wandb.wait.wandb_progress import WandbProgress

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook


@dataclass(frozen=True, kw_only=True)
class SensedJob:
    """The job the sensor waits on, and whether a kill deletes it."""

    job_name: str = option(
        REQUIRED,
        """the job, e.g. ``"{{ ti.xcom_pull('submit', key='volcano_job')['name'] }}"``.""",
        templated=True,
    )
    job_uid: str | None = option(
        None,
        """the submission to wait on (e.g. the ``volcano_job`` XCom's ``uid``); a job of the
        same name but another uid counts as this one deleted.""",
        templated=True,
    )
    delete_on_kill: bool = option(
        True, "delete the job when the task is killed, cleared or marked failed."
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
    wait: JobWait
    connection: Connection
    report: WandbReport
    logs: LogFollow
    limits: RunLimits

    @classmethod
    def of(cls, sensor: Any) -> SensorParts:
        return cls(
            job=build(SensedJob, sensor),
            wait=build(JobWait, sensor),
            connection=build(Connection, sensor),
            report=build(WandbReport, sensor, log=sensor.log),
            logs=build(LogFollow, sensor),
            limits=build(RunLimits, sensor),
        )


#: The sensor's options, part by part (the order of its docstring).
OPTIONS = options_of(SensedJob, JobWait, WandbReport, LogFollow, RunLimits, Connection)


class Pokes:
    """What the pokes of one process remember of the wait (a rescheduled poke is a new
    process, which starts afresh): the step's memory, when the wait began, since when the
    job is unreadable, and the W&B run a stall probe asks (``False``: none; ``None``: not
    known yet)."""

    def __init__(self) -> None:
        self.memory = StepMemory()
        self.waiting_since = time.time()
        self.failing_since: float | None = None
        self.wandb: WandbProgress | bool | None = None

    def step(
        self,
        hook: VolcanoHook,
        job: Mapping[str, Any] | None,
        target: JobTarget,
        task_log: Any,
        wandb_run: Callable[[], WandbRunRef | None],
    ) -> WaitResult | None:
        """The trigger's step over the sync hook (the same lines, gang mark and verdicts),
        asking the job's W&B run, ``wandb_run()``, once the job shows it."""
        self.failing_since = None
        if self.wandb is None and job is not None:
            run = wandb_run()
            self.wandb = WandbProgress(run) if run is not None else False
        asked = self.wandb if isinstance(self.wandb, WandbProgress) else None
        self.memory, result = step_io.take_step_sync(
            hook, job, target, self.memory, task_log, wandb=asked
        )
        return result

    def unread(self, target: JobTarget, exc: Exception, grace: float, task_log: Any) -> bool:
        """Poke again, unless reads have failed for ``grace`` seconds (then fail)."""
        now = time.monotonic()
        self.failing_since = self.failing_since or now
        where = f"Volcano job {target.namespace}/{target.job_name}"
        if now - self.failing_since < grace:
            task_log.warning("Could not read %s (%s); poking again", where, exc)
            return False
        raise ApiserverUnreachableError(
            f"Could not read {where} for {grace:g}s: {exc}. The job was "
            "left untouched; the next try waits on it again."
        ) from exc

"""Sync mode: run the trigger's wait in the task's own process, master-log follow included."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.airflow_compat import AirflowTaskTimeout
from airflow_volcano_wandb.job.job_status import job_ref
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
from airflow_volcano_wandb.wait import job_report
from airflow_volcano_wandb.wait.outcome import WaitResult

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook


class WaitEndedWithoutResult(RuntimeError):
    """The trigger's generator ended without an event (a bug, never a verdict)."""


def wait_in_process(
    hook: VolcanoHook,
    trigger: VolcanoJobTrigger,
    job: Mapping[str, Any],
    task_log: logging.Logger | Any,
) -> WaitResult:
    """The same wait the triggerer would run, here: its progress lines and (when it follows
    it, as the operator's does in sync mode) the master's log go to the task log."""
    trigger._log = task_log
    try:
        return WaitResult.from_event(asyncio.run(_first_event(trigger)))
    except AirflowTaskTimeout:
        # Airflow's execution_timeout, armed at the task's start, fires before the trigger's
        # own deadline: a job that ended meanwhile (say, during a watch outage) is its end.
        ended = job_report.ended_meanwhile(hook, job_ref(job), task_log)
        if ended is None:
            raise
        return ended


async def _first_event(trigger: VolcanoJobTrigger) -> dict[str, Any]:
    async for event in trigger.run():
        return event.payload
    raise WaitEndedWithoutResult(f"the wait on {trigger.namespace}/{trigger.job_name} ended")

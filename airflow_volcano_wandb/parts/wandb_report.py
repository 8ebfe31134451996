"""What a task that waited on a job reports to its W&B run: the summary metrics it reads back
and the link back to the task. A part of both the operator and ``VolcanoJobSensor``, so the
sensor's wait reports what the operator's own wait reports."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow.sdk import Context

from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.parts.options import option
from airflow_volcano_wandb.wait.training_progress import throughput
from airflow_volcano_wandb.wandb import wandb_backlink, wandb_run, wandb_urls

#: The XComs a task that waited on a job pushes about its W&B run (also the keys of ``run``).
XCOM_RUN_ID = "wandb_run_id"
XCOM_RUN_URL = "wandb_run_url"
XCOM_SUMMARY = "wandb_summary"
#: The finished run's steps per second and seconds per epoch (``training_progress``).
XCOM_THROUGHPUT = "throughput"
RUN_XCOMS = (XCOM_RUN_ID, XCOM_RUN_URL)

#: Seconds per HTTP request, and per read or write with its retries, of the W&B calls made
#: after the task's outcome is known: they must not hold the worker for long.
BEST_EFFORT_TIMEOUT = 30
BEST_EFFORT_DEADLINE = 60


@dataclass(frozen=True, kw_only=True)
class WandbReport:
    """The W&B connection and project a task reports to (see the module's docstring)."""

    wandb_conn_id: str | None = option(
        "wandb_default", "the ``wandb`` connection (API key, base URL, entity, project)."
    )
    wandb_entity: str | None = option(
        None, "W&B entity; else the connection's ``entity`` extra.", templated=True
    )
    wandb_project: str | None = option(
        None, "W&B project; else the connection's ``project`` extra.", templated=True
    )
    wandb_mode: str | None = option(
        None, "``online``, ``offline`` or ``disabled`` for the run's owner.", templated=True
    )
    wandb_summary_keys: Sequence[str] | None = option(
        None,
        """summary metrics to read from W&B after success and push to XCom ``wandb_summary``
        (best-effort: a missing summary is a warning and ``{}``).""",
    )
    log: Any = None

    def __post_init__(self) -> None:
        # One meaning of offline: the Airflow process's WANDB_MODE is every task's default.
        mode = wandb_run.effective_mode(self.wandb_mode, os.environ)
        object.__setattr__(self, "wandb_mode", mode)

    @property
    def online(self) -> bool:
        """Whether the run may be asked (a mode of ``None`` is the SDK's default, online)."""
        return self.wandb_mode not in ("offline", "disabled")

    def hook(self) -> WandbHook:
        return WandbHook(wandb_conn_id=self.wandb_conn_id)

    def best_effort_hook(self) -> WandbHook:
        """The hook for what is read or written after the job: bounded in wall time."""
        return WandbHook(
            wandb_conn_id=self.wandb_conn_id,
            timeout=BEST_EFFORT_TIMEOUT,
            deadline=BEST_EFFORT_DEADLINE,
        )

    def where(self, hook: WandbHook) -> tuple[str | None, str | None]:
        """The entity and project: these options', else ``hook``'s connection's."""
        return self.wandb_entity or hook.entity, self.wandb_project or hook.project

    def progress_kwargs(
        self, run_id: str | None, asks: bool, hook: WandbHook | None = None
    ) -> dict[str, Any]:
        """The W&B run the wait asks (``WaitSpec.wandb_run``), by id, never its key: only when
        it ``asks`` anything (``RunLimits.asks_wandb``), of an online run with a project and a
        connection with a key (``hook``'s, when loaded already)."""
        if not asks or not run_id or not self.wandb_conn_id or not self.online:
            return {}
        hook = hook or self.hook()
        entity, project = self.where(hook)
        if not hook.api_key or not project:
            return {}
        return {
            "wandb_conn_id": self.wandb_conn_id,
            "wandb_run_id": run_id,
            "wandb_entity": entity,
            "wandb_project": project,
            "wandb_summary_keys": list(self.wandb_summary_keys or []) or None,
        }

    def run_of(self, run_id: str, ti: Any) -> dict[str, Any]:
        """The ``run`` of ``run_id`` (id and URL), pushed to XCom for the "W&B Run" button."""
        hook = self.best_effort_hook()
        entity, project = self.where(hook)
        url = (
            wandb_urls.run_url(hook.base_url, entity, project, run_id)
            if entity and project
            else None
        )
        run = {XCOM_RUN_ID: run_id, XCOM_RUN_URL: url}
        for key, value in run.items():
            ti.xcom_push(key=key, value=value)
        return run

    def push_summary(
        self, ti: Any, run: Mapping[str, Any]
    ) -> tuple[dict[str, Any] | None, dict[str, float]]:
        """The summary metrics asked for (``None`` when none are) and the run's throughput
        (``training_progress.throughput``), from one read of its summary, pushed to XCom."""
        summary = self._read_summary(run)
        rates = throughput(summary)
        if rates:
            shown = ", ".join(f"{value:g} {key.replace('_', ' ')}" for key, value in rates.items())
            self.log.info("Throughput of W&B run %s: %s", run[XCOM_RUN_ID], shown)
        ti.xcom_push(key=XCOM_THROUGHPUT, value=rates)
        if not self.wandb_summary_keys:
            return None, rates
        asked = {key: summary[key] for key in self.wandb_summary_keys if key in summary}
        if missing := [key for key in self.wandb_summary_keys if key not in summary]:
            self.log.warning("W&B run has no summary value for %s", ", ".join(missing))
        ti.xcom_push(key=XCOM_SUMMARY, value=asked)
        return asked, rates

    def _read_summary(self, run: Mapping[str, Any]) -> dict[str, Any]:
        """The W&B run's summary; empty (with a warning) when it cannot be read."""
        if not self.online:
            self.log.warning("W&B mode is %s: no summary to read back", self.wandb_mode)
            return {}
        try:
            return self.best_effort_hook().get_run_summary(
                run[XCOM_RUN_ID], entity=self.wandb_entity, project=self.wandb_project
            )
        except Exception as exc:
            self.log.warning("Could not read the W&B run's summary (%s); pushing {}", exc)
            return {}

    def link_back(self, context: Context, run: Mapping[str, Any], outcome: str) -> None:
        """Write this task and its outcome into the W&B run; never fails the task."""
        hook = self.best_effort_hook()
        entity, project = self.where(hook)
        wandb_backlink.link_back(
            hook,
            run_context(context),
            outcome,
            run_id=run[XCOM_RUN_ID],
            entity=entity,
            project=project,
            mode=self.wandb_mode,
            has_key=bool(hook.api_key),
            log=self.log,
            resumed={key: run.get(key) for key in wandb_backlink.RESUME_KEYS},
        )


def run_context(context: Context) -> wandb_run.AirflowRunContext:
    """The task instance, as the W&B run is told about it."""
    ti, logical_date = context["ti"], getattr(context.get("dag_run"), "logical_date", None)
    return wandb_run.AirflowRunContext(
        dag_id=ti.dag_id,
        dag_run_id=ti.run_id,
        task_id=ti.task_id,
        try_number=ti.try_number,
        logical_date=logical_date.isoformat() if logical_date else None,
        task_url=getattr(ti, "log_url", None),
        map_index=-1 if ti.map_index is None else ti.map_index,  # a worker's: always an int
    )

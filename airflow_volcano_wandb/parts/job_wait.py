"""How the operator and the sensor wait on their job, one part for both: the options of the
wait (what it does is ``triggers/waiter.py``'s ``Waiter``, which each shell holds)."""

from __future__ import annotations

from dataclasses import dataclass

from airflow.configuration import conf

from airflow_volcano_wandb.parts.limits import templated_seconds
from airflow_volcano_wandb.parts.options import option
from airflow_volcano_wandb.wait import cleanup
from airflow_volcano_wandb.wait.cleanup import OnFinishAction
from airflow_volcano_wandb.wait.judge import DEFAULT_WATCH_FAILURE_GRACE


@dataclass(frozen=True, kw_only=True)
class JobWait:
    """How the operator and the sensor wait on their job, and what stays of it."""

    deferrable: bool = option(
        conf.getboolean("operators", "default_deferrable", fallback=False),
        "wait in the triggerer (a watch), freeing the worker slot, instead of in the worker.",
    )
    pending_timeout: float | str | None = option(
        None,
        """seconds until every rank must be placed and running; else the task fails with
        Volcano's reason and the job is deleted.""",
        templated=True,
    )
    watch_failure_grace: float = option(
        DEFAULT_WATCH_FAILURE_GRACE,
        """seconds the job may stay unreadable (the watch and direct reads, or a sensor's
        pokes, failing: lost permission, an unreachable apiserver) before the task fails; the
        job is never deleted for that: the next try waits on it again. A sensor in
        ``reschedule`` mode pokes from a new process each time, so an unreadable job is poked
        again until the sensor's ``timeout``.""",
    )
    on_finish_action: OnFinishAction = option(
        "delete_succeeded",
        """``delete_succeeded`` (default: a failed job stays for inspection until a retry
        replaces it), ``delete`` or ``keep``. A pending timeout, a crash loop, a stall and a
        timeout always delete.""",
        templated=True,
        check=cleanup.check_on_finish_action,
    )

    def pending_seconds(self) -> float | None:
        return templated_seconds(self.pending_timeout, "pending_timeout")

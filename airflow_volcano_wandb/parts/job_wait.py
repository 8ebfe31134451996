"""How the operator and the sensor wait on their job, one part for both: the options of the
wait (what it does is ``parts/waiter.py``'s ``Waiter``, which each shell holds)."""

from __future__ import annotations

from dataclasses import dataclass

from airflow.configuration import conf

from airflow_volcano_wandb.airflow_compat import SERIALIZED_SUPERVISOR_REQUESTS
from airflow_volcano_wandb.parts.limits import templated_seconds
from airflow_volcano_wandb.parts.options import option
from airflow_volcano_wandb.wait import cleanup
from airflow_volcano_wandb.wait.cleanup import OnFinishAction
from airflow_volcano_wandb.wait.judge import DEFAULT_WATCH_FAILURE_GRACE

#: The settle's length, where the Task SDK serializes a task's supervisor requests, which the
#: window's threads and the task's own send at once (docs/compatibility.md, note 7).
DEFAULT_DEFER_AFTER = 15.0 if SERIALIZED_SUPERVISOR_REQUESTS else 0.0


def _check_window(seconds: object) -> None:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"defer_after must be seconds, not {seconds!r}")
    if not seconds >= 0:  # NaN too
        raise ValueError(f"defer_after must be 0 or more seconds, not {seconds}")


@dataclass(frozen=True, kw_only=True)
class JobWait:
    """How the operator and the sensor wait on their job, and what stays of it."""

    deferrable: bool = option(
        conf.getboolean("operators", "default_deferrable", fallback=False),
        "wait in the triggerer (a watch), freeing the worker slot, instead of in the worker.",
    )
    defer_after: float = option(
        conf.getfloat("volcano_wandb", "defer_after", fallback=DEFAULT_DEFER_AFTER),
        """a deferrable task first waits this many seconds in its worker (the same wait as
        ``deferrable=False``), and defers only if the job still runs then. A job that ends
        within them (a smoke or evaluation run, a trainer that crashes at start) ends the task
        at once: it never defers, so it can neither meet Airflow's deferral race
        (apache/airflow#67287, #72716) nor wait out the trigger's settle that guards against
        it (``[volcano_wandb] defer_settle_seconds``, 15 s). The worker slot is held for at
        most this long; a kill meanwhile deletes the job as in sync mode. 0 defers at once.
        Default ``[volcano_wandb] defer_after``, else 15 s on Airflow 3.2 and later, the
        settle's length: a longer window holds a slot longer for every long job, and moves
        the jobs that pay the settle (those ending in the settle after it) to longer ones. On
        Airflow 3.0 and 3.1 the default is 0: their Task SDK does not serialize a task's
        requests to its supervisor, which the window's threads and the task's own may send
        at once.""",
        check=_check_window,
    )
    pending_timeout: float | str | None = option(
        None,
        """seconds until every rank must be placed and running; else the task fails with
        Volcano's reason and the job is deleted.""",
        templated=True,
        check=lambda value: templated_seconds(value, "pending_timeout"),
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

"""What happens to a job when the wait on it ends: the ``on_finish_action`` rule, and what a
kill of a deferred task deletes.

Pure. The operator and the sensor both apply :func:`deletes_job`, so a job is kept or deleted
by the same rule whichever of them waited.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from airflow_volcano_wandb.wait import job_status
from airflow_volcano_wandb.wait.outcome import Outcome

OnFinishAction = Literal["delete", "delete_succeeded", "keep"]
ON_FINISH_ACTIONS: tuple[str, ...] = ("delete", "delete_succeeded", "keep")


def check_on_finish_action(value: str) -> None:
    if value not in ON_FINISH_ACTIONS:
        raise ValueError(f"on_finish_action must be one of {ON_FINISH_ACTIONS}, got {value!r}")


def deletes_job(outcome: Outcome, on_finish_action: str) -> bool:
    """Whether the job goes when the wait ends with ``outcome``.

    A job that overstayed ``pending_timeout`` or Airflow's ``execution_timeout``, or that
    crash-loops past ``max_container_restarts``, holds GPUs without training (a crash loop
    never ends by itself under ``OnFailure``), so it goes whatever the action. A job whose
    state is unknown (the watch was lost) is never deleted: it may be hours into a run. A
    failed job stays for ``kubectl describe`` unless the action is ``delete``.
    """
    if outcome in (Outcome.PENDING_TIMEOUT, Outcome.TIMEOUT, Outcome.CRASH_LOOP):
        return True
    if outcome is Outcome.SUCCEEDED:
        return on_finish_action in ("delete", "delete_succeeded")
    if outcome is Outcome.FAILED:
        return on_finish_action == "delete"
    return False  # DELETED: gone already; WATCH_LOST: state unknown


def kill_deletes(job: Mapping[str, Any]) -> bool:
    """Whether a kill of the deferred task deletes ``job`` as a fresh read shows it.

    A kill stops training: only a job that still runs goes. One that has ended was seen to end
    by a wait, perhaps the one a second triggerer took over while this trigger was stale (its
    ``on_kill`` then reads the task's state only after the task resumed), and is left to the
    task that reports it and to ``on_finish_action``.
    """
    return not job_status.interpret(job).terminal

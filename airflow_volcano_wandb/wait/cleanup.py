"""What happens to a job when the wait on it ends: the ``on_finish_action`` rule.

Pure. The operator and the sensor both apply :func:`deletes_job`, so a job is kept or deleted
by the same rule whichever of them waited.
"""

from __future__ import annotations

from typing import Literal

from airflow_volcano_wandb.wait.outcome import Outcome

OnFinishAction = Literal["delete", "delete_succeeded", "keep"]
ON_FINISH_ACTIONS: tuple[str, ...] = ("delete", "delete_succeeded", "keep")


def check_on_finish_action(value: str) -> None:
    if value not in ON_FINISH_ACTIONS:
        raise ValueError(f"on_finish_action must be one of {ON_FINISH_ACTIONS}, got {value!r}")


def deletes_job(outcome: Outcome, on_finish_action: str) -> bool:
    """Whether the job goes when the wait ends with ``outcome``.

    A job that overstayed ``pending_timeout`` or Airflow's ``execution_timeout``, or that
    crash-loops past ``max_container_restarts``, or whose master stalled past
    ``stall_timeout``, holds GPUs without training (neither a crash loop under ``OnFailure``
    nor a hung trainer ends by itself), so it goes whatever the action; so does a job
    whose W&B run was stopped from W&B: a person asked for it to end, and under ``OnFailure``
    the kubelet would only restart the stopped trainer. A job whose
    state is unknown (the watch was lost) is never deleted: it may be hours into a run. A
    failed job stays for ``kubectl describe`` unless the action is ``delete``.
    """
    if outcome in (
        Outcome.PENDING_TIMEOUT,
        Outcome.TIMEOUT,
        Outcome.CRASH_LOOP,
        Outcome.STOPPED_FROM_WANDB,
        Outcome.STALLED,
    ):
        return True
    if outcome is Outcome.SUCCEEDED:
        return on_finish_action in ("delete", "delete_succeeded")
    if outcome is Outcome.FAILED:
        return on_finish_action == "delete"
    return False  # DELETED: gone already; WATCH_LOST: state unknown

"""What happens to a job when the wait on it ends: the ``on_finish_action`` rule.

Pure. The operator and the sensor both apply :func:`deletes_job`, so a job is kept or deleted
by the same rule whichever of them waited.
"""

from __future__ import annotations

from typing import Literal

from airflow_volcano_wandb.job.endings import Ending

OnFinishAction = Literal[
    "delete", "delete_succeeded", "keep", "delete_pod", "delete_succeeded_pod", "keep_pod"
]
ON_FINISH_ACTIONS: tuple[str, ...] = ("delete", "delete_succeeded", "keep")
#: ``KubernetesPodOperator``'s names for the same three rules (its ``OnFinishAction``), so a
#: DAG author moving a task from it keeps the value they know. Its pod is our whole job.
POD_OPERATOR_ACTIONS: dict[str, str] = {
    "delete_pod": "delete",
    "delete_succeeded_pod": "delete_succeeded",
    "keep_pod": "keep",
}


def normalize_on_finish_action(value: str) -> str:
    """``value`` as one of :data:`ON_FINISH_ACTIONS` (a ``KubernetesPodOperator`` name mapped
    to ours); :class:`ValueError` naming every accepted value for anything else."""
    action = POD_OPERATOR_ACTIONS.get(value, value) if isinstance(value, str) else None
    if action not in ON_FINISH_ACTIONS:
        accepted = (*ON_FINISH_ACTIONS, *POD_OPERATOR_ACTIONS)
        raise ValueError(f"on_finish_action must be one of {accepted}, got {value!r}")
    return action


def check_on_finish_action(value: str) -> None:
    normalize_on_finish_action(value)


def deletes_job(outcome: Ending, on_finish_action: str) -> bool:
    """Whether the job goes when the wait ends with ``outcome`` (``on_finish_action``: ours
    or ``KubernetesPodOperator``'s name for it).

    An ending whose row says ``deletes`` goes whatever the action: a job that holds GPUs
    without training and will not end by itself, or whose W&B run a person stopped (under
    ``OnFailure`` the kubelet would only restart the stopped trainer). A job whose state is
    unknown (the watch was lost) is never deleted: it may be hours into a run. A failed job
    stays for ``kubectl describe`` unless the action is ``delete``.
    """
    if outcome.row.deletes:
        return True
    action = normalize_on_finish_action(on_finish_action)
    if outcome is Ending.SUCCEEDED:
        return action in ("delete", "delete_succeeded")
    if outcome is Ending.FAILED:
        return action == "delete"
    return False  # DELETED: gone already; WATCH_LOST: state unknown

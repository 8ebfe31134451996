"""Deleting a job this task instance owns: one decision per fresh read, then a guarded delete.

Every cleanup path reads the job, decides with :func:`decide` and deletes with the read's
``resourceVersion`` as a precondition, so a newer try adopting the job in between makes the
delete fail and the read repeat. :func:`delete_if_owned` is that loop on the sync hook; the
trigger's kill runs the same steps on the async hook.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.job import job_status
from airflow_volcano_wandb.job.job_view import ObjectMeta
from airflow_volcano_wandb.job.ownership import may_delete

if TYPE_CHECKING:  # the trigger's kill imports this module on the event loop: no clients
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

log = logging.getLogger(__name__)

#: Reads before giving up when every delete loses its precondition to a concurrent change.
ATTEMPTS = 3


class Deletion(enum.Enum):
    """What one fresh read of the job says to do."""

    DELETE = "delete"
    GONE = "gone"  # no such job, or another submission under its name
    NEWER_TRY = "newer try"  # a newer try adopted it: its wait, not ours
    ENDED = "ended"  # a kill stops training; an ended job is left to whoever reports it


def decide(
    job: Mapping[str, Any] | None, uid: str | None, try_number: int | None, *, kill: bool
) -> Deletion:
    """Whether the cleanup of ``try_number`` deletes ``job`` as a fresh read shows it.

    :param kill: a kill stops training, so it deletes only a job that still runs. One that
        has ended was seen to end by a wait, perhaps the one a second triggerer took over
        while this trigger was stale (its ``on_kill`` then reads the task's state only after
        the task resumed), and is left to the task that reports it. The end of a wait deletes
        what ``on_finish_action`` says, ended or not.
    """
    if job is None or (uid and ObjectMeta.of(job).uid != uid):
        return Deletion.GONE
    if not may_delete(job, uid, try_number):
        return Deletion.NEWER_TRY
    if kill and job_status.interpret(job).terminal:
        return Deletion.ENDED
    return Deletion.DELETE


def delete_if_owned(
    hook: VolcanoHook,
    job: Mapping[str, str],
    try_number: int | None,
    task_log: Any = log,
    *,
    kill: bool = False,
) -> None:
    """Delete this submission unless a newer try adopted it (or, for a ``kill``, it has ended,
    as the trigger's kill decides); log, never raise."""
    name, namespace, uid = job["name"], job["namespace"], job.get("uid")
    try:
        for _ in range(ATTEMPTS):
            current = hook.get_job(name, namespace)
            step = decide(current, uid, try_number, kill=kill)
            if step is Deletion.NEWER_TRY:
                task_log.info("Volcano job %s/%s is a newer try's; left alone", namespace, name)
            if step is Deletion.ENDED:
                task_log.info(
                    "Volcano job %s/%s has ended; a kill stops only a running job, so it is "
                    "left for the task instance to report",
                    namespace,
                    name,
                )
            # decide() deletes only a job it was given: `current is None` never reaches here
            # as DELETE, and says so to mypy.
            if step is not Deletion.DELETE or current is None:
                return
            version = current["metadata"].get("resourceVersion")
            if hook.delete_job(name, namespace, uid=uid, resource_version=version):
                task_log.info("Deleted Volcano job %s/%s", namespace, name)
                return
    except Exception:
        task_log.exception("Could not delete Volcano job %s/%s", namespace, name)

"""What a stopped wait does to its job: delete it only on a kill that Airflow confirms.

Airflow stops a trigger the same way when a user kills, clears or marks its deferred task and
when the trigger merely moves to another triggerer (3.3 calls ``on_kill`` for both). So the job
is deleted only when Airflow says the task has left ``deferred``
(``airflow_compat.task_left_deferral``); otherwise it is left running, and the log says why.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from airflow_volcano_wandb import airflow_compat
from airflow_volcano_wandb.job import deletion
from airflow_volcano_wandb.job.deletion import Deletion
from airflow_volcano_wandb.triggers.off_loop import kubernetes_side


class StoppedTrigger(Protocol):
    """What a stop needs of the trigger: its job, its task instance, a hook and its log."""

    # Read-only: the trigger's fields are a frozen ``WaitSpec``.
    @property
    def job_name(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def job_uid(self) -> str | None: ...
    @property
    def try_number(self) -> int | None: ...

    task_instance: Any

    @property
    def log(self) -> Any: ...  # the trigger's logger (Airflow's)

    def hook(self) -> Any: ...


# Deletions run on even if on_kill is cancelled; the loop only keeps weak references to tasks.
_deletions: set[asyncio.Future] = set()


async def stop_waiting(trigger: StoppedTrigger) -> None:
    """The trigger was stopped before it fired: delete its job if, and only if, its task was
    killed; the deletion runs to its end even if the caller is cancelled meanwhile."""
    await _shielded(_delete_if_task_left(trigger))


async def _delete_if_task_left(trigger: StoppedTrigger) -> None:
    left = None
    if trigger.task_instance is not None:  # None: run in-process, with no Airflow to ask
        left = await airflow_compat.task_left_deferral(trigger.task_instance)
    where = f"Volcano job {trigger.namespace}/{trigger.job_name}"
    if left:
        await delete_job(trigger)
    elif left is False:
        trigger.log.info(
            "Trigger stopped while its task is still deferred (handed over to another "
            "triggerer, or this one is stopping): %s left running for the triggerer that "
            "takes over",
            where,
        )
    else:
        trigger.log.warning(
            "Trigger stopped, but Airflow could not confirm that the task was killed: %s left "
            "running (it ends by itself; finished_job_ttl removes it)",
            where,
        )


async def _shielded(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` to its end even when the awaiting task is cancelled meanwhile: the
    triggerer may cancel a trigger again while its ``on_kill`` or ``cleanup`` awaits."""
    task = asyncio.ensure_future(work)
    _deletions.add(task)
    task.add_done_callback(_deletions.discard)
    await asyncio.shield(task)


async def delete_job(trigger: StoppedTrigger) -> None:
    """Delete the trigger's job of a killed task, unless a newer try adopted it or it has
    ended already (``deletion.decide`` with ``kill=True``: a stale trigger's on_kill may read
    the task's state only after the triggerer that took over saw the job end)."""
    name, namespace = trigger.job_name, trigger.namespace
    where = f"Volcano job {namespace}/{name}"
    try:
        await kubernetes_side()
        hook = trigger.hook()
        for _ in range(3):
            job = await hook.get_job(name, namespace)
            step = deletion.decide(job, trigger.job_uid, trigger.try_number, kill=True)
            if step is Deletion.ENDED:
                trigger.log.info("Task killed while deferred: %s ended, left", where)
            if step is not Deletion.DELETE:
                return
            trigger.log.info("Task killed while deferred: deleting %s", where)
            version = job["metadata"].get("resourceVersion")
            if await hook.delete_job(
                name, namespace, uid=trigger.job_uid, resource_version=version
            ):
                return
    except Exception:
        trigger.log.exception("Could not delete Volcano job %s/%s", namespace, name)

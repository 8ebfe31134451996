"""Every difference between the Airflow 3 minors the provider supports, in one place.

The provider runs on Airflow 3.0, 3.1, 3.2 and 3.3 (the Task SDK releases; the exact patch
releases tested are in :mod:`.versions`). The shells import the Airflow names that moved
between those minors from here, and ask here whether a capability exists; where an older
minor lacks one, the provider does the best that minor allows and says so once
(:func:`warn_once`). The README's "Airflow compatibility" table lists the same differences.

- Exceptions moved from ``airflow.exceptions`` to ``airflow.sdk.exceptions`` (all of them by
  3.2); ``BaseHook`` into ``airflow.sdk`` in 3.1; the secrets masker's public names into
  ``airflow.sdk.log`` during 3.0.
- :data:`TRIGGER_ON_KILL`: from 3.3 the triggerer calls a trigger's ``on_kill`` when a user
  kills, clears or marks its deferred task. Before, it only cancels the trigger and calls
  ``cleanup()``, the same as when the triggerer itself stops; :func:`task_left_deferral`
  tells the two apart by asking the API server for the task's state.
"""

from __future__ import annotations

import logging
from typing import Any

import airflow
from packaging.version import Version

try:  # Airflow >= 3.2: every exception the provider raises or catches is in the Task SDK.
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowTaskTimeout,
        TaskDeferred,
    )
except ImportError:  # 3.0 and 3.1 raise and catch the core ones.
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowTaskTimeout,
        TaskDeferred,
    )

try:  # Airflow >= 3.1
    from airflow.sdk import BaseHook
except ImportError:
    from airflow.hooks.base import BaseHook  # type: ignore[no-redef,attr-defined]

try:  # Airflow >= 3.0.x (early 3.0 releases kept them in the execution-time package only)
    from airflow.sdk.log import mask_secret
except ImportError:
    from airflow.sdk.execution_time.secrets_masker import mask_secret  # type: ignore[no-redef]

try:  # Airflow >= 3.1; ``redact`` is what the masking is checked against.
    from airflow.sdk.log import redact
except ImportError:
    from airflow.sdk.execution_time.secrets_masker import redact  # type: ignore[no-redef]

__all__ = [
    "INSTALLED_AIRFLOW",
    "TRIGGER_ON_KILL",
    "AirflowException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowTaskTimeout",
    "BaseHook",
    "TaskDeferred",
    "mask_secret",
    "redact",
    "task_left_deferral",
    "warn_if_no_trigger_on_kill",
    "warn_once",
]

log = logging.getLogger(__name__)

#: The running Airflow's release, without pre-release or local parts.
INSTALLED_AIRFLOW = Version(Version(airflow.__version__).base_version)

#: The triggerer calls ``BaseTrigger.on_kill`` when a user kills a deferred task (3.3+).
TRIGGER_ON_KILL = Version("3.3") <= INSTALLED_AIRFLOW

# Capabilities already warned about in this process.
_warned: set[str] = set()


def warn_once(capability: str, message: str) -> None:
    """Log ``message`` as a warning the first time ``capability`` is found missing.

    :param capability: a short name of the capability, the key of "once".
    :param message: what the provider does instead, and the Airflow release that has it.
    """
    if capability in _warned:
        return
    _warned.add(capability)
    log.warning("Airflow %s: %s", INSTALLED_AIRFLOW, message)


def warn_if_no_trigger_on_kill() -> None:
    """Once per process, on Airflow < 3.3: how a kill of a deferred task reaches its job there."""
    if not TRIGGER_ON_KILL:
        warn_once(
            "trigger on_kill",
            "the triggerer does not call a trigger's on_kill when a user kills, clears or "
            "marks a deferred task (Airflow 3.3 does). The Volcano job is deleted when the "
            "trigger is cancelled and the API server says the task has left 'deferred'; if that "
            "state cannot be read then, the job is left running until it ends.",
        )


async def task_left_deferral(ti: Any) -> bool | None:
    """Whether the deferred task of a cancelled trigger is no longer deferred.

    For Airflow < 3.3, whose triggerer cancels a trigger (and calls its ``cleanup()``) both
    when a user kills, clears or marks its task and when the triggerer itself stops or hands
    the trigger to another triggerer: only in the first case has the task left ``deferred``.
    The answer comes from the API server (the Task SDK's ``get_task_states``).

    :param ti: the trigger's ``task_instance`` (dag, task, run ids, map index).
    :returns: ``True`` (killed, cleared or marked: not deferred any more), ``False`` (still
        deferred), ``None`` when the state could not be read (never act on a guess).
    """
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    try:
        states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
            dag_id=ti.dag_id,
            task_ids=[ti.task_id],
            run_ids=[ti.run_id],
            map_index=ti.map_index,
        )
    except Exception:
        log.warning("Could not read the state of %s", ti, exc_info=True)
        return None
    # The API keys a mapped task instance as "<task_id>_<map_index>".
    key = ti.task_id if ti.map_index < 0 else f"{ti.task_id}_{ti.map_index}"
    run_states = states.get(ti.run_id, {})
    if key not in run_states:  # the run or the task instance is gone: not deferred any more
        return True
    return run_states[key] != "deferred"

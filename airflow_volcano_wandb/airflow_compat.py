"""Every difference between the Airflow 3 minors the provider supports, in one place.

The provider runs on Airflow 3.0 to 3.3 (the patch releases tested are in :mod:`.versions`).
The shells import the names that moved between those minors from here, and ask here whether
a capability exists (the flags below, all 3.3's); where an older minor lacks one, the
provider does the best that minor allows and says so once (:func:`warn_once`).
docs/compatibility.md lists the same differences.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from typing import Any

import airflow
from packaging.version import Version

try:  # Airflow >= 3.2: every exception the provider raises or catches is in the Task SDK.
    from airflow.sdk.exceptions import (
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
        TaskDeferred,
    )
except ImportError:  # 3.0 and 3.1 raise and catch the core ones.
    from airflow.exceptions import (  # type: ignore[no-redef]
        AirflowException,
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
        AirflowTaskTimeout,
        TaskDeferred,
    )

try:  # Airflow >= 3.1: the Task SDK's own configuration parser.
    from airflow.sdk import conf
except ImportError:  # 3.0: the core one (same sections and options).
    # A different class from 3.1's parser (mypy reads 3.1's), with the same get* methods.
    from airflow.configuration import conf  # type: ignore[assignment]

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
    "ASSET_STATE_STORE",
    "INSTALLED_AIRFLOW",
    "RETRY_POLICY",
    "SERIALIZED_SUPERVISOR_REQUESTS",
    "TASK_STATE_STORE",
    "TRIGGER_ON_KILL",
    "AirflowException",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "AirflowTaskTimeout",
    "BaseHook",
    "TaskDeferred",
    "VariableAssetState",
    "asset_state",
    "conf",
    "mask_secret",
    "redact",
    "retry_policy_kwargs",
    "task_left_deferral",
    "task_state_store",
    "warn_if_no_trigger_on_kill",
    "warn_once",
]

log = logging.getLogger(__name__)

#: The running Airflow's release, without pre-release or local parts.
INSTALLED_AIRFLOW = Version(Version(airflow.__version__).base_version)

#: The triggerer calls ``BaseTrigger.on_kill`` when a user kills, clears or marks a deferred
#: task (3.3+); it calls it too when a trigger moves to another triggerer, so
#: :func:`task_left_deferral` is asked on every release.
TRIGGER_ON_KILL = Version("3.3") <= INSTALLED_AIRFLOW
#: A task takes a ``retry_policy`` (``airflow.sdk.ExceptionRetryPolicy``; 3.3+).
RETRY_POLICY = Version("3.3") <= INSTALLED_AIRFLOW
#: The Task SDK sends a task's supervisor one request at a time, whichever thread asks (3.2+:
#: ``CommsDecoder.send`` holds a lock); before, two at once can take each other's answers.
SERIALIZED_SUPERVISOR_REQUESTS = Version("3.2") <= INSTALLED_AIRFLOW
#: A task's context has ``task_state_store``, kept across its tries (3.3+); before, a retry
#: finds its job by its labels.
TASK_STATE_STORE = Version("3.3") <= INSTALLED_AIRFLOW
#: A task's context has ``asset_state_store`` (3.3+, AIP-103); before, an asset's state is
#: kept in Airflow Variables (:class:`VariableAssetState`).
ASSET_STATE_STORE = Version("3.3") <= INSTALLED_AIRFLOW

# Capabilities already warned about in this process.
_warned: set[str] = set()


def warn_once(capability: str, message: str) -> None:
    """Log ``message`` (what the provider does instead, and the release that has it) as a
    warning the first time ``capability`` (a short name, the key of "once") is found missing."""
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

    Every triggerer stops a trigger the same way whether a user killed, cleared or marked its
    task or the trigger moves to another triggerer (3.3 even calls ``on_kill`` for both; older
    releases call ``cleanup()``): only in the first case has the task left ``deferred``.
    The answer comes from the API server (the Task SDK's ``get_task_states``).

    :param ti: the trigger's ``task_instance`` (dag, task, run ids, map index).
    :returns: ``True`` (killed, cleared or marked: not deferred any more), ``False`` (still
        deferred), ``None`` when the state could not be read (never act on a guess).
    """
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from asgiref.sync import sync_to_async

    try:
        # Not thread-sensitive: asgiref's one shared thread may be busy with the connection
        # reads of every other trigger, and a kill must not queue behind them.
        states = await sync_to_async(RuntimeTaskInstance.get_task_states, thread_sensitive=False)(
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
    # No state: the run or the task instance is gone, so it is not deferred any more either.
    return states.get(ti.run_id, {}).get(key) != "deferred"


def retry_policy_kwargs(build: Callable[[], Any]) -> dict[str, Any]:
    """An operator's ``retry_policy`` keyword argument where this Airflow has retry policies.

    On Airflow 3.3: ``{"retry_policy": build()}``. Before: ``{}`` (the task retries by its
    ``retries`` and ``retry_delay`` alone, whatever the exception), warned once per process.
    ``build`` is only called on 3.3, so it may import ``ExceptionRetryPolicy``, ``RetryRule``
    and ``RetryAction`` from ``airflow.sdk`` itself::

        VolcanoPyTorchJobOperator(..., retries=2, **retry_policy_kwargs(my_policy))

    :param build: returns the policy (e.g. an ``ExceptionRetryPolicy``).
    """
    if RETRY_POLICY:
        return {"retry_policy": build()}
    warn_once(
        "retry_policy",
        "task retry policies (retry_policy) are an Airflow 3.3 feature: the policy is left out "
        "and the task retries by retries and retry_delay alone, whatever the failure.",
    )
    return {}


class VariableAssetState:
    """An asset's state kept in Airflow Variables: the asset state store's ``get``/``set``.

    For Airflow < 3.3, which has no asset state store. Each key is one Variable named
    ``asset_state:<name>:<key>`` (``name``: the asset's) holding the value as JSON.
    """

    def __init__(self, name: str) -> None:
        self.name = name

    def variable(self, key: str) -> str:
        """The Variable that holds ``key``."""
        return f"asset_state:{self.name}:{key}"

    def get(self, key: str, default: Any = None) -> Any:
        """The value stored under ``key``, else ``default``."""
        from airflow.sdk import Variable

        raw = Variable.get(self.variable(key), default=None)
        return default if raw is None else json.loads(raw)

    def set(self, key: str, value: Any) -> None:
        """Write ``value`` (JSON-serialisable, not ``None``) under ``key``."""
        if value is None:
            raise ValueError("an asset state value must not be None")
        from airflow.sdk import Variable

        Variable.set(self.variable(key), json.dumps(value))


def asset_state(context: Mapping[str, Any], asset: Any) -> Any:
    """The state store (``get(key, default)``, ``set(key, value)``) of ``asset`` (an
    ``airflow.sdk.Asset``) in a running task's ``context``: ``asset_state_store[asset]`` on
    Airflow 3.3; before, a :class:`VariableAssetState`, warned once."""
    if ASSET_STATE_STORE:
        return context["asset_state_store"][asset]
    store = VariableAssetState(asset.name)
    warn_once(
        "asset_state_store",
        "the asset state store is an Airflow 3.3 feature: asset state is kept in Variables "
        f"named '{store.variable('<key>')}' instead.",
    )
    return store


def task_state_store(context: Mapping[str, Any]) -> Any:
    """The task's state store (``context["task_state_store"]``, kept across its tries), or
    ``None`` where Airflow has none (before 3.3; warned once per process)."""
    store = context.get("task_state_store")
    if store is None and not TASK_STATE_STORE:
        warn_once(
            "task_state_store",
            "the task state store is an Airflow 3.3 feature: a retry finds its Volcano job by "
            "the task instance's labels alone (3.3 first reads the job's uid from the store).",
        )
    return store

"""Imports a trigger needs from the Kubernetes side, made off the triggerer's event loop."""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType

#: The async hook every wait calls on the loop once it starts: the Kubernetes clients (sync and
#: asyncio), aiohttp and the cncf provider's hook, some two thousand modules.
_ASYNC_HOOK = "airflow_volcano_wandb.hooks.volcano_async"


async def kubernetes_side(module: str = "airflow_volcano_wandb.wait.job_watcher") -> ModuleType:
    """``wait.job_watcher`` (or ``logs.master_log``), with the async hook and the Kubernetes
    clients it needs, imported off the event loop.

    The triggerer imports a trigger's module inside its event loop, so the trigger modules
    import nothing that is not loaded there already: importing the Kubernetes clients takes
    seconds on a busy machine (2.6 s on an idle 2-core one, 15.7 s in a triggerer pod at a
    load of 17), and every other trigger in the triggerer would stall meanwhile. The watch
    modules name the hook for its type only, so it is imported here too.
    """

    def load() -> ModuleType:
        importlib.import_module(_ASYNC_HOOK)
        return importlib.import_module(module)

    return await asyncio.to_thread(load)

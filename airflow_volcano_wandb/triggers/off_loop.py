"""Imports a trigger needs from the Kubernetes side, made off the triggerer's event loop."""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType


async def kubernetes_side(module: str = "airflow_volcano_wandb.wait.job_watcher") -> ModuleType:
    """``wait.job_watcher`` (or ``logs.master_log``), with the Kubernetes clients it needs,
    imported off the event loop.

    The triggerer imports a trigger's module inside its event loop, so the trigger modules
    import nothing that is not loaded there already: importing the Kubernetes clients takes
    seconds on a busy machine, and every other trigger in the triggerer would stall meanwhile.
    """
    return await asyncio.to_thread(importlib.import_module, module)

"""Imports a trigger needs from the Kubernetes side, made off the triggerer's event loop."""

from __future__ import annotations

import asyncio
import importlib
from types import ModuleType


async def kubernetes_side(module: str = "airflow_volcano_wandb.wait.job_watcher") -> ModuleType:
    """``wait.job_watcher`` (or ``logs.master_log``) imported off the event loop: importing
    the Kubernetes clients takes seconds, and every other trigger would stall meanwhile."""
    return await asyncio.to_thread(importlib.import_module, module)

"""Hooks of the provider.

Their names load on first use (PEP 562): a DAG file that imports ``hooks.kubernetes_api`` or
``hooks.volcano_requests`` for a constant loads no Kubernetes client by way of this package.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
    from airflow_volcano_wandb.hooks.wandb import WandbHook

__all__ = ["AsyncVolcanoHook", "VolcanoHook", "WandbHook"]
_MODULES = {"AsyncVolcanoHook": "volcano_async", "VolcanoHook": "volcano", "WandbHook": "wandb"}


def __getattr__(name: str) -> Any:
    if name not in _MODULES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_MODULES[name]}"), name)

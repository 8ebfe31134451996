"""Hooks of the provider."""

from __future__ import annotations

from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from airflow_volcano_wandb.hooks.wandb import WandbHook

__all__ = ["AsyncVolcanoHook", "VolcanoHook", "WandbHook"]

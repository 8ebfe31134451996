"""Operator extra links of the provider."""

from __future__ import annotations

from airflow_volcano_wandb.links.wandb import WANDB_RUN_URL_XCOM_KEY, WandbRunLink

__all__ = ["WANDB_RUN_URL_XCOM_KEY", "WandbRunLink"]

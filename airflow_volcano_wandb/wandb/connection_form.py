"""The ``wandb`` connection's form in the Airflow UI.

Kept apart from the hook, with no Airflow import, because Airflow reads it from the provider
info while it is still configuring itself.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.wandb.wandb_urls import DEFAULT_BASE_URL

# Declarative connection-form metadata (Airflow >= 3.2 reads it from the provider info's
# "connection-types" entry as "conn-fields" / "ui-field-behaviour"). The hook's classmethods
# return the same content for Airflow versions that still ask the hook.
WANDB_CONN_FIELDS: dict[str, dict[str, Any]] = {
    "entity": {
        "label": "Entity",
        "schema": {"type": ["string", "null"]},
        "description": "Default W&B entity (user or team) for runs and Launch queues.",
    },
    "project": {
        "label": "Project",
        "schema": {"type": ["string", "null"]},
        "description": "Default W&B project for runs.",
    },
}
WANDB_UI_FIELD_BEHAVIOUR: dict[str, Any] = {
    "hidden-fields": ["schema", "port", "login"],
    "relabeling": {"password": "API Key", "host": "Base URL"},
    "placeholders": {
        "host": f"{DEFAULT_BASE_URL} (leave empty for W&B cloud)",
        "password": "W&B API key",
        "entity": "my-team",
        "project": "my-project",
    },
}

"""A run config for the trainer's ``wandb.config``, through the SDK's own W&B Launch path.

As the Launch agent does: ``WANDB_LAUNCH=True`` and the config as JSON in ``WANDB_CONFIG``,
or in ``WANDB_CONFIG_0``, ``WANDB_CONFIG_1``, ... slices when too long for one variable
(wandb's ``sdk/launch/_project_spec.py``); ``wandb.init()`` lays them over the config the code
passes, so a Launch job's code reads ``wandb.config`` unchanged. Every rank's main container
gets the same env. Pure: no Airflow, no ``wandb``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from airflow_volcano_wandb.template.errors import error_at
from airflow_volcano_wandb.template.structure import main_container
from airflow_volcano_wandb.template.values import copy_json, type_name

LAUNCH_ENV = "WANDB_LAUNCH"
CONFIG_ENV = "WANDB_CONFIG"
#: The longest value the Launch agent puts in one variable (wandb's ``MAX_ENV_LENGTHS``
#: default, for its Kubernetes runner); a longer config is sliced as the agent slices it.
MAX_ENV_LENGTH = 32670
_CONFIG_SHARD = re.compile(rf"{CONFIG_ENV}_[0-9]+\Z")


def run_config_env(
    run_config: Mapping[str, Any], max_length: int = MAX_ENV_LENGTH
) -> list[dict[str, str]]:
    """The env entries that give ``run_config`` to ``wandb.init()``, as the Launch agent
    writes them.

    :raises TemplateError: when ``run_config`` is not a JSON mapping with string keys.
    """
    if not isinstance(run_config, Mapping):
        raise error_at(("run_config",), f"must be a mapping, not {type_name(run_config)}")
    text = json.dumps(copy_json(run_config, ("run_config",), "run_config"))
    entries = [{"name": LAUNCH_ENV, "value": "True"}]
    if len(text) <= max_length:
        return [*entries, {"name": CONFIG_ENV, "value": text}]
    shards = [text[i : i + max_length] for i in range(0, len(text), max_length)]
    return entries + [{"name": f"{CONFIG_ENV}_{i}", "value": s} for i, s in enumerate(shards)]


def _is_config_env(name: Any) -> bool:
    return name in (CONFIG_ENV, LAUNCH_ENV) or (
        isinstance(name, str) and bool(_CONFIG_SHARD.match(name))
    )


def apply_run_config(tasks: list[dict[str, Any]], run_config: Mapping[str, Any] | None) -> None:
    """Give every task's main container the run config's env. The provider owns these names:
    a template's or ``env``'s ``WANDB_CONFIG``, shard or ``WANDB_LAUNCH`` is replaced, since
    the SDK reads ``WANDB_CONFIG`` before any shard and a stale one would win. ``None`` or an
    empty mapping: nothing changes."""
    if not run_config and isinstance(run_config, Mapping | type(None)):
        return
    entries = run_config_env(run_config)
    for i, task in enumerate(tasks):
        path, container = main_container(task, ("spec", "tasks", i))
        env = container.setdefault("env", [])
        if not isinstance(env, list):
            raise error_at((*path, "env"), "must be a list")
        env[:] = [e for e in env if not (isinstance(e, dict) and _is_config_env(e.get("name")))]
        env.extend(dict(entry) for entry in entries)

"""What a training container is told about its W&B run and its Airflow task (pure).

The env every container of the job gets (``container_env``), the W&B Launch macros a run
fills (``macro_values``), and the way back: a trainer turns its env into the run's config
(``airflow_config_from_env``). ``docs/wandb.md`` is the user-facing description.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_volcano_wandb.wandb.wandb_run import WandbRunSpec
from airflow_volcano_wandb.wandb.wandb_urls import is_default_base_url, normalise_url

# Kubernetes env values are strings; these are the names the trainer reads.
ENV_RANK_MODE = "AVW_WANDB_RANK_MODE"
ENV_TASK_URL = "AVW_AIRFLOW_TASK_URL"


def container_env(spec: WandbRunSpec, *, is_master_task: bool) -> list[dict[str, Any]]:
    """Return the Kubernetes ``env`` entries for one container of the job.

    Every container gets the shared part (project, entity, group, job type, tags, base URL,
    resume policy, the Airflow context, the API key as a ``secretKeyRef``, never a literal).
    The rest depends on ``spec.rank_mode`` (docs/wandb.md, "Rank modes"): ``"master"`` gives
    the run id and name to the master task (rank 0) only and ``WANDB_MODE=disabled`` to every
    other container, so a script calling ``wandb.init()`` on every rank starts exactly one run;
    ``"shared"`` gives every container the run and W&B's multi-writer settings
    (``WANDB_X_PRIMARY`` in the master task only, ``WANDB_X_LABEL`` the pod's name).
    """
    env = [
        *_shared_env(spec),
        *_rank_env(spec, is_master_task=is_master_task),
        *_api_key_env(spec),
        *_airflow_env(spec),
    ]
    taken = {entry["name"] for entry in env}
    env += _values({name: value for name, value in spec.extra_env.items() if name not in taken})
    return env


EnvValues = dict[str, "str | int | None"]


def _values(values: EnvValues) -> list[dict[str, Any]]:
    """Plain ``env`` entries, in order; an unset (``None``) value is left out."""
    return [
        {"name": name, "value": str(value)} for name, value in values.items() if value is not None
    ]


def _shared_env(spec: WandbRunSpec) -> list[dict[str, Any]]:
    base_url = None if is_default_base_url(spec.base_url) else normalise_url(spec.base_url or "")
    return _values(
        {
            "WANDB_PROJECT": spec.project,
            "WANDB_ENTITY": spec.entity,
            "WANDB_RUN_GROUP": spec.group,
            "WANDB_JOB_TYPE": spec.job_type,
            "WANDB_TAGS": ",".join(spec.tags) if spec.tags else None,
            "WANDB_BASE_URL": base_url,
            "WANDB_RESUME": spec.resume,
            # Every container, like the group: a silent rank's env still says which sweep it
            # serves.
            "WANDB_SWEEP_ID": spec.sweep_id,
        }
    )


def _rank_env(spec: WandbRunSpec, *, is_master_task: bool) -> list[dict[str, Any]]:
    run = {"WANDB_RUN_ID": spec.run_id, "WANDB_NAME": spec.run_name}
    if spec.mode == "disabled":
        # Disabled wins everywhere: no rank may reach W&B, whatever the rank mode.
        named = is_master_task or spec.rank_mode == "shared"
        return _values({"WANDB_MODE": "disabled", **(run if named else {})})
    if spec.rank_mode == "shared":
        label = {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}
        return [
            *_values(
                {
                    "WANDB_MODE": "shared",
                    **run,
                    "WANDB_X_PRIMARY": "true" if is_master_task else "false",
                    "WANDB_X_UPDATE_FINISH_STATE": None if is_master_task else "false",
                }
            ),
            {"name": "WANDB_X_LABEL", "valueFrom": label},
        ]
    if is_master_task:
        return _values({"WANDB_MODE": spec.mode, **run})
    return _values({"WANDB_MODE": "disabled"})


def _api_key_env(spec: WandbRunSpec) -> list[dict[str, Any]]:
    ref = spec.api_key_secret
    if ref is None:
        return []
    key_ref = {"secretKeyRef": {"name": ref.name, "key": ref.key}}
    return [{"name": "WANDB_API_KEY", "valueFrom": key_ref}]


def _airflow_env(spec: WandbRunSpec) -> list[dict[str, Any]]:
    ctx = spec.airflow
    context: EnvValues = {}
    if ctx is not None:
        context = {
            "AIRFLOW_CTX_DAG_ID": ctx.dag_id,
            "AIRFLOW_CTX_DAG_RUN_ID": ctx.dag_run_id,
            "AIRFLOW_CTX_TASK_ID": ctx.task_id,
            "AIRFLOW_CTX_TRY_NUMBER": ctx.try_number,
            "AIRFLOW_CTX_MAP_INDEX": ctx.map_index if ctx.map_index >= 0 else None,
            "AIRFLOW_CTX_LOGICAL_DATE": ctx.logical_date,
            ENV_TASK_URL: ctx.task_url,
        }
    return _values({**context, ENV_RANK_MODE: spec.rank_mode})


def macro_values(spec: WandbRunSpec, *, author: str | None = None) -> dict[str, str]:
    """Return the W&B Launch run macros this spec fills, as strings.

    ``${run_id}``, ``${run_name}``, ``${entity_name}``, ``${project_name}`` and ``${author}``.
    An unknown entity, project or author is left out rather than guessed, so the template
    renderer can report the macro as unfilled instead of silently writing an empty string.
    """
    known = {"entity_name": spec.entity, "project_name": spec.project, "author": author}
    return {
        "run_id": spec.run_id,
        "run_name": spec.run_name or spec.run_id,
        **{name: value for name, value in known.items() if value},
    }


_AIRFLOW_ENV_TO_CONFIG = {
    "AIRFLOW_CTX_DAG_ID": "dag_id",
    "AIRFLOW_CTX_DAG_RUN_ID": "run_id",
    "AIRFLOW_CTX_TASK_ID": "task_id",
    "AIRFLOW_CTX_TRY_NUMBER": "try_number",
    "AIRFLOW_CTX_MAP_INDEX": "map_index",
    "AIRFLOW_CTX_LOGICAL_DATE": "logical_date",
    ENV_TASK_URL: "task_url",
}


def airflow_config_from_env(environ: Mapping[str, str]) -> dict[str, Any]:
    """Return the Airflow context from a pod's env as a dict for the W&B run config.

    A trainer calls ``wandb.init(config={"airflow": airflow_config_from_env(os.environ)})``;
    keys whose env var is absent are left out. ``try_number`` and ``map_index`` are ints.
    """
    config: dict[str, Any] = {}
    for env_name, key in _AIRFLOW_ENV_TO_CONFIG.items():
        value = environ.get(env_name)
        if value is None or value == "":
            continue
        try:
            config[key] = int(value) if key in ("try_number", "map_index") else value
        except ValueError:
            config[key] = value
    return config

"""The example trainer's W&B run: which ranks start one, and with what identity and config.

``WANDB_*`` and ``AVW_WANDB_RANK_MODE`` decide which ranks talk to W&B (see
:func:`wandb_plan`), and the ``AIRFLOW_CTX_*`` / ``AVW_AIRFLOW_TASK_URL`` env becomes the
``airflow`` dict of the run config, so the W&B run names the Airflow task that started it.

The image installs only torch and wandb, so the trainer must not import the provider package;
``AIRFLOW_ENV_TO_CONFIG`` mirrors ``airflow_volcano_wandb.wandb.wandb_env.airflow_config_from_env``
and a test keeps the two in sync. The W&B API key (``WANDB_API_KEY``, from a Secret) is read by
the wandb SDK only; nothing here reads, logs or prints it, and env values are shown only from
an allow-list (:func:`printable_env`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from hyperparameters import HyperParams
from process_group import DistInfo, broadcast_bytes
from stopping import stop_from_wandb

# Env name -> key in the run config's ``airflow`` dict. Mirrors the provider's
# airflow_config_from_env (tests/trainer checks they agree).
AIRFLOW_ENV_TO_CONFIG: dict[str, str] = {
    "AIRFLOW_CTX_DAG_ID": "dag_id",
    "AIRFLOW_CTX_DAG_RUN_ID": "run_id",
    "AIRFLOW_CTX_TASK_ID": "task_id",
    "AIRFLOW_CTX_TRY_NUMBER": "try_number",
    "AIRFLOW_CTX_MAP_INDEX": "map_index",
    "AIRFLOW_CTX_LOGICAL_DATE": "logical_date",
    "AVW_AIRFLOW_TASK_URL": "task_url",
}
_INT_CONFIG_KEYS = {"try_number", "map_index"}

RANK_MODE_ENV = "AVW_WANDB_RANK_MODE"
RANK_MODES = ("master", "shared")
# WANDB_MODE values under which nothing reaches a W&B server; shared mode needs one.
LOCAL_WANDB_MODES = {"offline", "dryrun", "disabled"}


# Only these env names are ever echoed to the log; WANDB_API_KEY is deliberately absent.
_PRINTABLE_ENV = (
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_RUN_ID",
    "WANDB_NAME",
    "WANDB_RUN_GROUP",
    "WANDB_JOB_TYPE",
    "WANDB_MODE",
    "WANDB_BASE_URL",
    RANK_MODE_ENV,
)


def printable_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The allow-listed W&B env this process was given (set values only), safe to print."""
    return {name: environ[name] for name in _PRINTABLE_ENV if environ.get(name)}


@dataclass(frozen=True)
class WandbPlan:
    """Whether this rank calls ``wandb.init`` and with which mode settings."""

    init: bool
    shared: bool
    note: str | None = None
    """Why the requested rank mode was adjusted, printed once by rank 0."""


def airflow_config(environ: Mapping[str, str]) -> dict[str, Any]:
    """Build the run config's ``airflow`` dict from the Airflow context env (absent = left out)."""
    config: dict[str, Any] = {}
    for env_name, key in AIRFLOW_ENV_TO_CONFIG.items():
        value = environ.get(env_name)
        if value is None or value == "":
            continue
        if key in _INT_CONFIG_KEYS:
            try:
                config[key] = int(value)
            except ValueError:
                config[key] = value
        else:
            config[key] = value
    return config


def wandb_plan(environ: Mapping[str, str], rank: int) -> WandbPlan:
    """Decide whether this rank starts W&B, following ``AVW_WANDB_RANK_MODE``.

    ``master`` (default): only global rank 0 calls ``wandb.init``; one run per job.
    ``shared``: every rank calls ``wandb.init`` on the same run id in W&B's shared mode
    (rank 0 primary). Shared mode is server-side multi-writer, so under a local
    ``WANDB_MODE`` (offline, dryrun, disabled) it falls back to ``master``: N offline
    writers would leave N conflicting local copies of one run id.
    """
    requested = (environ.get(RANK_MODE_ENV) or "master").strip().lower()
    if requested not in RANK_MODES:
        raise SystemExit(f"{RANK_MODE_ENV} must be one of {', '.join(RANK_MODES)}")
    mode = (environ.get("WANDB_MODE") or "").strip().lower()
    if requested == "shared" and mode in LOCAL_WANDB_MODES:
        return WandbPlan(
            init=rank == 0,
            shared=False,
            note=f"{RANK_MODE_ENV}=shared needs W&B online; WANDB_MODE={mode}, so only rank 0 "
            "writes the run (master rank mode)",
        )
    if requested == "shared":
        return WandbPlan(init=True, shared=True)
    return WandbPlan(init=rank == 0, shared=False)


def _env_list(value: str | None) -> list[str] | None:
    items = [item.strip() for item in (value or "").split(",") if item.strip()]
    return items or None


def start_wandb(
    plan: WandbPlan,
    info: DistInfo,
    params: HyperParams,
    environ: Mapping[str, str],
) -> Any:
    """Call ``wandb.init`` as the plan says; return the run, or ``None`` for a silent rank.

    Identity comes from the operator's env, passed explicitly so the contract is visible
    here rather than implied by the SDK's env handling.
    """
    if not plan.init:
        return None
    # Imported here so silent ranks never load the SDK at all.
    import wandb

    config: dict[str, Any] = {
        **asdict(params),
        "world_size": info.world_size,
        "processes_per_pod": info.local_world_size,
        "backend": info.backend or "none",
        "device": info.device.type,
        "rank_mode": "shared" if plan.shared else "master",
        "airflow": airflow_config(environ),
    }
    kwargs: dict[str, Any] = {
        "project": environ.get("WANDB_PROJECT") or None,
        "entity": environ.get("WANDB_ENTITY") or None,
        "id": environ.get("WANDB_RUN_ID") or None,
        "name": environ.get("WANDB_NAME") or None,
        "group": environ.get("WANDB_RUN_GROUP") or None,
        "job_type": environ.get("WANDB_JOB_TYPE") or None,
        "tags": _env_list(environ.get("WANDB_TAGS")),
        # The operator's WANDB_RESUME: "must" on a try that resumes an interrupted run.
        "resume": environ.get("WANDB_RESUME") or "allow",
    }
    # The SDK asks the server every 15 s whether the run was stopped (online runs only) and
    # calls stop_fn when it was: see stop_from_wandb.
    settings: dict[str, Any] = {"stop_fn": stop_from_wandb}
    if plan.shared:
        primary = info.rank == 0
        settings.update(
            mode="shared",
            x_primary=primary,
            x_label=f"rank-{info.rank}",
            # Only the primary may mark the run finished, else the first worker to exit
            # would end the run while the others still log.
            x_update_finish_state=primary,
        )
        if primary:
            kwargs["config"] = config
    else:
        kwargs["config"] = config
    kwargs["settings"] = wandb.Settings(**settings)
    run = wandb.init(**kwargs)
    # Log against our own step counter: shared mode ignores wandb.log(step=...).
    run.define_metric("train/step")
    run.define_metric("train/*", step_metric="train/step")
    run.define_metric("elastic/*", step_metric="train/step")
    run.define_metric("epoch")
    run.define_metric("eval/*", step_metric="epoch")
    return run


def params_from_run_config(run: Any, params: HyperParams, info: DistInfo) -> HyperParams:
    """The hyper-parameters as ``wandb.config`` has them, the same on every rank.

    ``wandb.init`` lays a W&B Launch run config (``WANDB_LAUNCH`` with ``WANDB_CONFIG`` or its
    ``WANDB_CONFIG_<n>`` slices, the operator's ``run_config``) over the flags and ``TRAIN_*``
    values it was given, so a Launch job's hyper-parameters reach this code unchanged. Rank
    0's run decides; the ranks that start no run receive its values.
    """
    values = asdict(params)
    if run is not None:
        values.update({k: type(values[k])(run.config[k]) for k in values if k in run.config})
    if info.distributed:
        values = json.loads(broadcast_bytes(json.dumps(values).encode(), info))
    return HyperParams(**values)

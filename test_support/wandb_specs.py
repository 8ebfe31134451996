"""A W&B run's spec and env as the wandb/ tests build and read them: one task instance's
context, its key's Secret, a spec with any field overridden, and a container env as a dict, as
Kubernetes resolves it and as the installed SDK's Settings read it."""

from __future__ import annotations

from airflow_volcano_wandb.wandb.wandb_run import (
    SecretKeyRef,
    WandbRunSpec,
)
from test_support.wandb_support import airflow_run_context

CTX = airflow_run_context()
SECRET = SecretKeyRef("wandb-job-abc-api-key", "api-key")
POD_NAME = "wandb-job-abc-worker-1"
API_KEY = "k" * 40


def make_spec(**overrides: object) -> WandbRunSpec:
    kwargs: dict[str, object] = {
        "entity": "team",
        "project": "mlp",
        "api_key_secret": SECRET,
        "mode": "offline",
    }
    kwargs.update(overrides)
    return WandbRunSpec.for_task_instance(CTX, **kwargs)  # type: ignore[arg-type]


def as_dict(env: list[dict]) -> dict[str, object]:
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def resolve(env: list[dict]) -> dict[str, str]:
    """What the kubelet would put in the container: Secret and Downward API values filled."""
    out = {}
    for entry in env:
        if "value" in entry:
            out[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry["valueFrom"]:
            out[entry["name"]] = API_KEY
        elif entry["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
            out[entry["name"]] = POD_NAME
        else:  # pragma: no cover - a new kind of valueFrom would need handling here
            raise AssertionError(entry)
    return out


def sdk_settings(environ: dict[str, str]):
    """The wandb SDK's settings after reading ``environ`` the way wandb.init does."""
    from wandb.sdk import wandb_settings  # a hard dependency: missing means failing

    settings = wandb_settings.Settings()
    settings.update_from_env_vars(environ)
    return settings

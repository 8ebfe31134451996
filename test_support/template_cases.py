"""Values the template tests share: a full set of W&B Launch run macros, the seed, and a
render of it with overrides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from airflow_volcano_wandb import template as template_module

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"
FIXTURES = REPO / "tests" / "fixtures" / "templates"
MACROS = {
    "image_uri": "registry.local/ddp-mlp:1.0",
    "run_id": "k3x9p2qa",
    "run_name": "ddp-mlp-1",
    "entity_name": "ml-platform",
    "project_name": "retraining",
    "author": "airflow",
}


def render_job(template: Any, **kwargs: Any) -> dict[str, Any]:
    """``render_job`` trusting the template's namespace, as these tests' fixtures (like the
    seed, ``namespace: wandb``) were written before the namespace became the deployment's
    choice. The namespace rule itself is tested in ``test_template_pod_security.py``."""
    kwargs.setdefault("template_namespace_allowed", True)
    # The torchrun stage adds env and a volume to every PyTorch rank; it has tests of its own
    # (test_template_torchrun.py), so the other stages' tests see their own effect only.
    kwargs.setdefault("torchrun_env", False)
    kwargs.setdefault("shm_size", None)
    return template_module.render_job(template, **kwargs)


GPU_MACROS = {**MACROS, "batch_size": 64}


def seed() -> dict[str, Any]:
    return yaml.safe_load(SEED.read_text())


def render(template: Any = None, **overrides: Any) -> dict[str, Any]:
    return render_job(seed() if template is None else template, macros=MACROS, **overrides)


def render_gpu(**overrides: Any) -> dict[str, Any]:
    """The GPU fixture (``svc-gpu-pytorch.yaml``: the svc plugin, a sidecar beside the worker's
    trainer) rendered with ``GPU_MACROS``."""
    return render_job(FIXTURES / "svc-gpu-pytorch.yaml", macros=GPU_MACROS, **overrides)


def task(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in job["spec"]["tasks"] if t["name"] == name)


def containers(job: dict[str, Any], name: str) -> list[dict[str, Any]]:
    return task(job, name)["template"]["spec"]["containers"]

"""What the seeded W&B stand-in of ``tests/integration/conftest.py`` (fixture ``standin``)
holds: one run with a summary, and Launch queues with and without template variables."""

from __future__ import annotations

from pathlib import Path

import yaml

from test_support.wandb_support import ENTITY, PROJECT

RUN_ID = "a1b2c3d4e5f6g7h8"
SUMMARY = {
    "eval/accuracy": 0.9375,
    "train/loss": 0.0421,
    "epoch": 10,
    "_step": 99,
    "_runtime": 12.5,
    "_wandb": {"runtime": 12},
}
REPO = Path(__file__).resolve().parents[1]
MACROS = {
    "image_uri": "registry.local/ddp-mlp:1.0",
    "run_id": "r1",
    "run_name": "r1",
    "entity_name": ENTITY,
    "project_name": PROJECT,
    "author": "airflow",
}
#: The GraphQL operations the SDK may send the stand-in; any other fails the test.
KNOWN_OPERATIONS = {
    "Viewer",
    "GetDefaultEntity",
    "Run",
    "GetRunQueueMetadata",
    "GetDefaultResourceConfig",
    "UpsertBucket",
    "ServerFeaturesQuery",
    "RunInputArtifacts",
    "RunOutputArtifacts",
}


def seed_template() -> dict:
    for candidate in (
        REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml",
        Path("/work/shared/seed/volcano-pytorch-queue-template.yaml"),
    ):
        if candidate.exists():
            return yaml.safe_load(candidate.read_text())
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "wandb-job-${run_id}"},
        "spec": {"tasks": [{"name": "master", "replicas": 1}]},
    }


#: A queue admin's guardrails, as declared in W&B (``create_run_queue(template_variables=)``).
VARIABLES = {
    "workers": {"type": "integer", "minimum": 1, "maximum": 4, "default": 1},
    "gpus": {"type": "integer", "minimum": 0, "maximum": 2, "description": "GPUs per rank"},
}


def templated_seed() -> dict:
    """The seed with its worker count and GPUs replaced by W&B template variables."""
    template = seed_template()
    worker = template["spec"]["tasks"][1]
    worker["replicas"] = "{{workers}}"
    container = worker["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": "{{gpus}}"}}
    return template

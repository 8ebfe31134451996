"""Values the template tests share: a full set of W&B Launch run macros."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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

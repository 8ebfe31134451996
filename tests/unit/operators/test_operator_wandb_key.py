"""W&B online mode needs a key: without one the task fails before anything is submitted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from test_support.operator_tries import StubTaskInstance, context_for

SEED = Path(__file__).resolve().parents[3] / "dags" / "templates"


def test_online_mode_without_any_key_fails_before_touching_the_cluster_with_a_stub_ti():
    template = yaml.safe_load((SEED / "volcano-pytorch-queue-template.yaml").read_text())
    op = VolcanoPyTorchJobOperator(
        task_id="train",
        template=template,
        image_uri="example.org/trainer:1",
        namespace="wandb",
        wandb_conn_id=None,  # no connection, hence no key
        wandb_entity="e",
        wandb_project="p",
        wandb_mode="online",
    )
    with pytest.raises(AirflowException, match="wandb_mode='online' but no W&B API key"):
        op.execute(context_for(StubTaskInstance("d", "train", "r")))
    assert "hook" not in op.__dict__  # the Kubernetes hook was never even built

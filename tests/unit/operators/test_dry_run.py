"""See the job before it runs (#33 item 3): ``dry_run()`` prints the Volcano Job a task would
submit, with its Jinja rendered from the DAG's params, and the key only as a Secret's name."""

from __future__ import annotations

from datetime import datetime

import pytest
import yaml
from airflow.sdk import DAG, Param

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from test_support.template_cases import SEED


def _operator(**kwargs) -> VolcanoPyTorchJobOperator:
    with DAG(
        "dry",
        schedule=None,
        start_date=datetime(2026, 1, 1),
        params={"workers": Param(3, type="integer")},
        template_searchpath=[str(SEED.parent)],  # a file template, as from the DAGs folder
    ):
        return VolcanoPyTorchJobOperator(
            task_id="train",
            template=SEED.name,
            image_uri="registry.example.com/team/ddp:1.0",
            replicas={"worker": "{{ params.workers }}"},
            namespace="wandb",
            **kwargs,
        )


def test_dry_run_prints_the_job_with_the_params_defaults_and_no_key(wandb_connection, capsys):
    op = _operator()
    op.dry_run()
    printed = capsys.readouterr().out
    # One YAML document, whatever an Airflow release logs to stdout around it.
    job = yaml.safe_load(printed[printed.index("---\n") : printed.index("\n...\n") + 5])
    assert job["kind"] == "Job" and job["metadata"]["namespace"] == "wandb"
    worker = next(t for t in job["spec"]["tasks"] if t["name"] == "worker")
    assert worker["replicas"] == 3  # the param's default, rendered
    pod_labels = worker["template"]["metadata"]["labels"]
    assert pod_labels["airflow-volcano-wandb.io/dag-id"] == "dry"
    assert pod_labels["airflow-volcano-wandb.io/try-number"] == "1"
    assert wandb_connection not in printed  # the key's Secret is named, never the key
    assert "secretKeyRef" in printed
    assert op.replicas == {"worker": "{{ params.workers }}"}  # the DAG's task is untouched


def test_dry_run_names_what_only_a_run_can_give(wandb_connection):
    op = _operator(job_name="{{ ti.xcom_pull(task_ids='x') }}")
    with pytest.raises(AirflowException, match="dry_run: a templated option"):
        op.dry_run()

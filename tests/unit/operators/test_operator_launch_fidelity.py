"""The operator keeps the queue's guardrails and fills ``${NAME}`` from its environment as
W&B Launch does (#41 items 2 and 3): an override past a template variable's bound fails the
task before any Kubernetes client exists; ``macros_from_env`` comes from the DAG or the
``[volcano_wandb]`` config."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.preview import rendered_job
from airflow_volcano_wandb.template import TemplateError, load_template
from test_support.operator_tries import StubTaskInstance, context_for
from test_support.template_cases import SEED

SCHEMAS = [{"name": "workers", "schema": {"type": "integer", "maximum": 4, "default": 1}}]


def _operator(template: Any = None, **kwargs: Any) -> VolcanoPyTorchJobOperator:
    return VolcanoPyTorchJobOperator(
        task_id="train",
        template=template if template is not None else load_template(SEED),
        image_uri="registry.example.com/team/ddp:1.0",
        namespace="wandb",
        wandb_mode="offline",
        **kwargs,
    )


def test_a_dags_override_past_the_queues_bound_fails_before_any_job_can_exist_with_a_stub_ti(
    wandb_connection,
):
    template = load_template(SEED)
    template["spec"]["tasks"][1]["replicas"] = "{{workers}}"
    op = _operator(template, template_variable_schemas=SCHEMAS, replicas={"worker": 20})
    with pytest.raises(AirflowException, match="nothing was submitted") as info:
        op.execute(context_for(StubTaskInstance("d", "train", "r")))
    assert (
        "spec.tasks[1].replicas: the replicas override sets 20: template variable 'workers' is "
        "20, above its maximum 4"
    ) in str(info.value)
    assert "hook" not in op.__dict__  # no Kubernetes client was ever built


def _image_from(op: VolcanoPyTorchJobOperator) -> str:
    return rendered_job(op)["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["image"]


def test_macros_from_env_comes_from_the_config_unless_the_dag_names_it(
    wandb_connection, monkeypatch
):
    monkeypatch.setenv("MY_REGISTRY", "registry.corp.example")
    monkeypatch.setenv("OTHER_REGISTRY", "other.corp.example")
    template = load_template(SEED)
    template["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["image"] = (
        "${MY_REGISTRY}/ddp:1"
    )
    with pytest.raises(AirflowException, match="must be listed in macros_from_env") as info:
        rendered_job(_operator(template))
    assert "registry.corp.example" not in str(info.value)
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__MACROS_FROM_ENV", "OTHER_REGISTRY, MY_REGISTRY")
    assert _image_from(_operator(template)) == "registry.corp.example/ddp:1"
    with pytest.raises(AirflowException, match="must be listed in macros_from_env"):
        rendered_job(_operator(template, macros_from_env=["OTHER_REGISTRY"]))


def test_a_pattern_in_macros_from_env_fails_the_dags_parse():
    with pytest.raises(TemplateError, match="takes names, not patterns"):
        _operator(macros_from_env=["MY_*"])

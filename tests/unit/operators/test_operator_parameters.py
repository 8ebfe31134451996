"""The operator's parameters, spread over its base classes, behave as one flat signature."""

from __future__ import annotations

import inspect
from datetime import datetime

import pytest
from airflow.sdk import DAG

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.job_template import JobTemplateMixin
from airflow_volcano_wandb.operators.pod_logs import PodLogMixin
from airflow_volcano_wandb.operators.restarts import RestartBudgetMixin
from airflow_volcano_wandb.operators.resume import ResumeMixin
from airflow_volcano_wandb.operators.wandb import WandbRunMixin

PARAMETER_CLASSES = (
    VolcanoPyTorchJobOperator,
    JobTemplateMixin,
    WandbRunMixin,
    PodLogMixin,
    RestartBudgetMixin,
    ResumeMixin,
)


def _own_parameters(cls: type) -> list[str]:
    signature = inspect.signature(cls.__init__.__wrapped__)
    return [name for name in signature.parameters if name not in ("self", "kwargs")]


@pytest.mark.parametrize("cls", PARAMETER_CLASSES, ids=lambda cls: cls.__name__)
def test_every_parameter_is_documented_on_the_class_that_takes_it(cls):
    undocumented = [p for p in _own_parameters(cls) if f":param {p}:" not in cls.__doc__]
    assert undocumented == []


def test_no_parameter_is_taken_by_two_classes():
    names = [name for cls in PARAMETER_CLASSES for name in _own_parameters(cls)]
    assert len(names) == len(set(names))


def test_default_args_reach_the_parameters_of_every_base():
    with DAG("params", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        op = VolcanoPyTorchJobOperator(
            task_id="train",
            template="seed.yaml",
            default_args={
                "wandb_project": "from-defaults",
                "pod_security": "restricted",
                "poll_interval": 3.0,
            },
        )
    assert (op.wandb_project, op.pod_security, op.poll_interval) == (
        "from-defaults",
        "restricted",
        3.0,
    )
    assert dag.task_dict["train"] is op


def test_template_fields_are_attributes_and_cover_the_templated_promises():
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml")
    assert all(hasattr(op, field) for field in op.template_fields)
    assert len(op.template_fields) == len(set(op.template_fields))
    promised = {"wandb_run_id", "wandb_mode", "wandb_tags", "wandb_rank_mode"}
    promised |= {"wandb_api_key_secret", "pending_timeout", "on_finish_action", "replicas"}
    promised |= {"resume_on"}
    assert promised <= set(op.template_fields)
    assert op.template_ext == (".yaml", ".yml", ".json")


def test_partial_and_expand_accept_the_parameters_of_every_base():
    with DAG("mapped", schedule=None, start_date=datetime(2026, 1, 1)):
        mapped = VolcanoPyTorchJobOperator.partial(
            task_id="sweep", template="seed.yaml", wandb_project="p", deferrable=True
        ).expand(replicas=[{"worker": 1}, {"worker": 2}])
    assert mapped.partial_kwargs["wandb_project"] == "p"
    with (
        DAG("unknown", schedule=None, start_date=datetime(2026, 1, 1)),
        pytest.raises(TypeError, match="no_such_parameter"),
    ):
        VolcanoPyTorchJobOperator.partial(task_id="t", template="seed.yaml").expand(
            no_such_parameter=[1]
        )


def test_resume_on_names_known_causes_and_may_be_templated():
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml")
    assert op.resume_on == ("preempted", "killed")
    with pytest.raises(ValueError, match="'preemption'"):
        VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", resume_on=["preemption"])
    templated = "{{ params.resume_on }}"  # checked once rendered, at execute
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", resume_on=templated)
    assert op.resume_on == templated

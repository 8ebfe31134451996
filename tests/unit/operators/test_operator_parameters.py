"""The operator's and the sensor's parameters, declared part by part, behave as one flat
signature: the one ``inspect.signature``, the docs and Airflow's ``default_args``,
``partial``/``expand`` and templating see."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Mapping
from datetime import datetime

import pytest
from airflow.sdk import DAG

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.operator_parts import OPTIONS as OPERATOR_OPTIONS
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.sensors.volcano import OPTIONS as SENSOR_OPTIONS
from airflow_volcano_wandb.template import render_job

SHELLS = [(VolcanoPyTorchJobOperator, OPERATOR_OPTIONS), (VolcanoJobSensor, SENSOR_OPTIONS)]


def _parameters(cls: type) -> list[str]:
    signature = inspect.signature(cls)
    return [p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY]


@pytest.mark.parametrize(("cls", "declared"), SHELLS, ids=lambda x: getattr(x, "__name__", ""))
def test_every_parameter_is_documented_on_the_class_users_see(cls, declared):
    assert _parameters(cls) == [o.name for o in declared]
    undocumented = [p for p in _parameters(cls) if f":param {p}:" not in cls.__doc__]
    assert undocumented == []


@pytest.mark.parametrize(("cls", "declared"), SHELLS, ids=lambda x: getattr(x, "__name__", ""))
def test_no_parameter_is_taken_by_two_parts(cls, declared):
    names = [o.name for o in declared]
    assert len(names) == len(set(names))
    # Beside the templated options, only the Job a try submits (for the Rendered Template view).
    shown = tuple(f for f in cls.template_fields if f == "rendered_job")
    assert cls.template_fields == (*(o.name for o in declared if o.templated), *shown)


def _made_up(option):
    """A value of the option's declared type that is not its default: made-up text, else (an
    option held to its type refuses text) the default's opposite or one more."""
    try:
        return option.checked(f"from-defaults-{option.name}")
    except (TypeError, ValueError):
        pass
    kinds = typing.get_args(option.annotation) or (option.annotation,)
    if bool in kinds:
        return not option.default
    if int in kinds or float in kinds:
        return (option.default or 0) + 1
    if any(typing.get_origin(kind) is Mapping for kind in kinds):
        return {"from-defaults": option.name}
    return [f"from-defaults-{option.name}"]  # a list of strings


def test_default_args_reach_every_parameter_of_every_part():
    defaults = {o.name: _made_up(o) for o in OPERATOR_OPTIONS if o.check is None}
    del defaults["template"]  # the task's own template is given; its default is to be one
    with DAG("params", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        op = VolcanoPyTorchJobOperator(task_id="train", template="seed.yaml", default_args=defaults)
    assert {name: getattr(op, name) for name in defaults} == defaults
    assert dag.task_dict["train"] is op
    with DAG("sensed", schedule=None, start_date=datetime(2026, 1, 1)):
        sensor = VolcanoJobSensor(
            task_id="wait", default_args={"job_name": "j", "wandb_project": "p", "log_lines": 7}
        )
    assert (sensor.job_name, sensor.wandb_project, sensor.log_lines) == ("j", "p", 7)


def test_template_fields_are_attributes_and_cover_the_templated_promises():
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml")
    assert all(hasattr(op, field) for field in op.template_fields)
    assert len(op.template_fields) == len(set(op.template_fields))
    promised = {"wandb_run_id", "wandb_mode", "wandb_tags", "wandb_rank_mode"}
    promised |= {"wandb_api_key_secret", "pending_timeout", "on_finish_action", "replicas"}
    promised |= {"resume_on"}
    assert promised <= set(op.template_fields)
    assert op.template_ext == (".yaml", ".yml", ".json")


def test_partial_and_expand_accept_the_parameters_of_every_part():
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


def test_every_option_handed_to_render_job_is_its_keyword_with_its_default():
    """``JobRequest.render`` passes each ``render=`` option by name: a renamed or dropped
    ``render_job`` keyword, or a default the two disagree on, shows here, not in a DAG."""
    keywords = inspect.signature(render_job).parameters
    handed = {o.render: o.default for o in OPERATOR_OPTIONS if o.render}
    assert set(handed) <= set(keywords)
    assert {name: keywords[name].default for name in handed} == handed

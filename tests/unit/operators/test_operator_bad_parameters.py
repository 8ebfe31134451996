"""A parameter of the operator or the sensor given a value of the wrong shape fails the DAG's
parse naming the parameter, never with another error; one Jinja does not render, and that no
check of its own covers, is held to its declared type (``Option.checked``)."""

from __future__ import annotations

import math
import re

import pytest
from airflow.sdk import DAG

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator, preview
from airflow_volcano_wandb.operators.operator_parts import OPTIONS as OPERATOR_OPTIONS
from airflow_volcano_wandb.operators.operator_parts import OperatorParts
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.sensors.volcano import OPTIONS as SENSOR_OPTIONS
from test_support.template_cases import SEED

SHELLS = [
    (VolcanoPyTorchJobOperator, OPERATOR_OPTIONS, {"template": "seed.yaml"}),
    (VolcanoJobSensor, SENSOR_OPTIONS, {"job_name": "j"}),
]
WRONG_SHAPES = [
    None, "abc", 3, -1, True, 1.5, math.nan, math.inf, [], {}, ["x"], {"a": 1}, [1], object(),
]  # fmt: skip
CASES = [
    pytest.param(cls, option, given, id=f"{cls.__name__}.{option.name}")
    for cls, declared, given in SHELLS
    for option in declared
    if option.name not in given
]


@pytest.mark.parametrize(("cls", "option", "given"), CASES)
def test_a_wrong_shape_is_refused_naming_the_parameter_or_accepted(cls, option, given) -> None:
    unnamed = []
    for wrong in WRONG_SHAPES:
        try:
            cls(task_id="t", **given, **{option.name: wrong})
        except (TypeError, ValueError) as error:
            if option.name not in str(error):
                unnamed.append((wrong, repr(error)))
    assert unnamed == []


@pytest.mark.parametrize(
    ("cls", "option", "given"),
    [case for case in CASES if not case.values[1].templated and not case.values[1].render],
)
def test_a_parameter_jinja_does_not_render_refuses_a_value_of_no_type_it_declares(
    cls, option, given
) -> None:
    with pytest.raises((TypeError, ValueError), match=option.name):
        cls(task_id="t", **given, **{option.name: object()})


@pytest.mark.parametrize(
    ("name", "value", "said"),
    [
        ("poll_interval", "abc", "poll_interval must be a number, 0 or more, not 'abc'"),
        ("poll_interval", math.nan, "poll_interval must be a number, 0 or more, not nan"),
        (
            "master_log_max_lines",
            -1,
            "master_log_max_lines must be a whole number, 0 or more, not -1",
        ),
        ("deferrable", "yes", "deferrable must be True or False, not 'yes'"),
        ("in_cluster", "false", "in_cluster must be True or False or None, not 'false'"),
        ("wandb_summary_keys", "loss", "wandb_summary_keys must be a list of strings or None"),
        ("defer_after", math.nan, "defer_after must be 0 or more seconds, not nan"),
        ("resume_on", 3, "resume_on must be a string or a list of causes, not 3"),
        ("on_finish_action", ["keep"], "on_finish_action must be one of"),
        ("pending_timeout", "abc", "pending_timeout must be in seconds (0 or more), not 'abc'"),
        ("pending_timeout", -5, "pending_timeout must be in seconds (0 or more), not -5"),
    ],
)
def test_the_refusal_says_what_the_parameter_takes(name: str, value: object, said: str) -> None:
    with pytest.raises((TypeError, ValueError), match=f"^{re.escape(said)}"):
        VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", **{name: value})


def test_values_of_the_declared_types_are_accepted() -> None:
    op = VolcanoPyTorchJobOperator(
        task_id="t",
        template="seed.yaml",
        poll_interval=2,
        master_log_max_lines=0,
        deferrable=True,
        in_cluster=None,
        wandb_summary_keys=("loss",),
        finished_job_ttl=None,
    )
    assert (op.poll_interval, op.master_log_max_lines, op.wandb_summary_keys) == (2, 0, ("loss",))


def test_a_templated_parameter_is_checked_once_rendered_before_anything_is_submitted() -> None:
    op = VolcanoPyTorchJobOperator(
        task_id="t", template="seed.yaml", pending_timeout="{{ params.pending }}"
    )
    op.pending_timeout = "ten minutes"  # as Airflow leaves it once the Jinja is rendered
    with pytest.raises(AirflowException, match="pending_timeout must be in seconds"):
        OperatorParts.of(op)  # execute's first step: no hook, no render, no submit yet
    op.pending_timeout = "600"
    assert OperatorParts.of(op).wait.pending_seconds() == 600.0


RENDERED_SHAPES = [*WRONG_SHAPES, "", ("a",), ("a", "b", "c"), {"worker": "abc"}]
# What the run would need anyway, so that only the parameter under test can be wrong.
GOOD = {
    "image_uri": "img:1",
    "namespace": "team-a",
    "wandb_mode": "offline",
    "wandb_entity": "e",
    "wandb_project": "p",
}


@pytest.mark.parametrize(
    "option", [o for o in OPERATOR_OPTIONS if o.templated and o.name != "template"], ids=str
)
def test_a_templated_parameter_rendered_to_a_wrong_shape_is_refused_naming_it(option) -> None:
    """Through the dry run's rendering (execute's own, with no cluster): the parameter's value
    as Jinja would leave it, refused before anything could be submitted, naming it."""
    unnamed = []
    for wrong in RENDERED_SHAPES:
        with DAG("d", schedule=None, template_searchpath=[str(SEED.parent)]):
            try:
                op = VolcanoPyTorchJobOperator(
                    task_id="t",
                    template=SEED.name,
                    **{**GOOD, option.name: wrong},
                )
            except (TypeError, ValueError):
                continue  # refused at the parse, naming it: the tests above
        try:
            preview.rendered_job(op)
        except Exception as error:
            if option.name not in str(error):
                unnamed.append((wrong, repr(error)))
    assert unnamed == []

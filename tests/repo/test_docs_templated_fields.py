"""docs/operator.md names every parameter of the operator and the sensor, and says which are
templated; the classes' signatures and template_fields agree."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
from airflow.sdk import BaseOperator, BaseSensorOperator

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.parts.job_request import JobRequest
from airflow_volcano_wandb.parts.options import options_of
from airflow_volcano_wandb.sensors import VolcanoJobSensor

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()


def _names(text: str) -> set[str]:
    return set(re.findall(r"`([a-z_]+)`", text))


def _parameters(cls: type) -> set[str]:
    return {name for c in cls.__mro__ for name in inspect.signature(c.__init__).parameters}


def _own_parameters(cls: type, base: type) -> set[str]:
    """The keyword parameters ``cls`` adds to ``base``'s."""
    return set(inspect.signature(cls.__init__).parameters) - set(
        inspect.signature(base.__init__).parameters
    )


@pytest.mark.parametrize(
    ("cls", "base", "begins", "ends"),
    [
        (VolcanoPyTorchJobOperator, BaseOperator, "All of them work in", "Templated, like the"),
        (VolcanoJobSensor, BaseSensorOperator, "`VolcanoJobSensor` parameters:", "The sensor's"),
    ],
    ids=["operator", "sensor"],
)
def test_the_page_names_every_parameter(cls, base, begins, ends):
    m = re.search(rf"{re.escape(begins)}(.*?){re.escape(ends)}", PAGE, re.S)
    assert m, f"docs/operator.md no longer lists {cls.__name__}'s parameters"
    missing = sorted(_own_parameters(cls, base) - _names(m.group(1)))
    assert not missing, f"docs/operator.md's list of {cls.__name__}'s parameters lacks {missing}"


def test_the_operators_templated_fields_are_as_the_page_says():
    """Both ways: what the page calls templated is, and what is templated the page calls so.

    "The template's own fields" are what the job is (``JobRequest``, as the page's opening
    names it) and the namespace it lands in; ``rendered_job`` is no parameter but the
    rendered job the task's Rendered Template view shows.
    """
    m = re.search(
        r"Templated, like the\s+template's own fields: every W&B parameter but (.*?), and(.*?)\.",
        PAGE,
        re.S,
    )
    assert m, "docs/operator.md no longer says which operator fields are templated"
    not_templated, named = _names(m.group(1)), _names(m.group(2))
    fields = set(VolcanoPyTorchJobOperator.template_fields)
    parameters = _parameters(VolcanoPyTorchJobOperator)
    wandb = {p for p in parameters if p.startswith("wandb_")}
    assert not_templated <= wandb, not_templated - wandb
    assert fields & wandb == wandb - not_templated, (fields & wandb) ^ (wandb - not_templated)
    assert named <= fields, named - fields
    templates_own = {o.name for o in options_of(JobRequest)} | {"namespace"}
    unsaid = fields - wandb - named - templates_own - {"rendered_job"}
    assert not unsaid, f"templated, but docs/operator.md does not say so: {sorted(unsaid)}"
    assert "rendered_job" not in parameters


def test_the_sensors_templated_fields_are_as_the_page_says():
    m = re.search(r"The sensor's templated fields: (.*?)\.", PAGE, re.S)
    assert m, "docs/operator.md no longer lists the sensor's templated fields"
    assert _names(m.group(1)) == set(VolcanoJobSensor.template_fields)

"""``parts/options.py``: one declaration gives a shell's parameter, its doc line, whether it
is templated, the ``render_job`` keyword it fills and the check its value must pass."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.parts import options
from airflow_volcano_wandb.parts.options import REQUIRED, option


def _positive(value: int) -> None:
    if value <= 0:
        raise ValueError(f"count must be positive, not {value}")


@dataclass(frozen=True, kw_only=True)
class Part:
    """A part with one option of each kind."""

    name: str = option(REQUIRED, "what it is called.", templated=True)
    queue_name: str | None = option(None, "where it goes.", templated=True, render="queue")
    count: int = option(1, "how many;\n        a positive number.", templated=True, check=_positive)
    fixed: int = option(2, "set at the parse.", check=_positive, render=True)
    log: object = None  # not an option: handed in by the shell


OPTIONS = options.options_of(Part)


def test_the_declarations_give_the_signature_the_docs_and_the_templated_fields():
    assert [o.name for o in OPTIONS] == ["name", "queue_name", "count", "fixed"]
    parameters = options.signature(OPTIONS).parameters
    assert parameters["name"].default is inspect.Parameter.empty
    assert (parameters["count"].default, parameters["count"].annotation) == (1, int)
    assert parameters["queue_name"].kind is inspect.Parameter.KEYWORD_ONLY
    assert ":param count: how many; a positive number. Templated." in options.param_docs(OPTIONS)
    assert options.templated(OPTIONS) == ("name", "queue_name", "count")


def test_a_value_is_checked_at_the_parse_unless_jinja_still_renders_it():
    kwargs = {"name": "n", "count": "{{ params.count }}", "task_id": "t"}
    assert options.take(OPTIONS, kwargs)["count"] == "{{ params.count }}"
    assert kwargs == {"task_id": "t"}  # the rest is Airflow's
    with pytest.raises(ValueError, match="positive"):
        options.take(OPTIONS, {"name": "n", "count": 0})
    with pytest.raises(TypeError):  # an option not templated is never taken for Jinja
        options.take(OPTIONS, {"name": "n", "fixed": "{{ params.fixed }}"})


def test_a_part_is_built_from_the_rendered_values_and_a_bad_one_fails_the_task():
    shell = SimpleNamespace(name="n", queue_name="q", count=3, fixed=2)
    part = options.build(Part, shell, log="the task's")
    assert (part.count, part.log) == (3, "the task's")
    assert options.render_kwargs(part) == {"queue": "q", "fixed": 2}
    shell.count = 0  # as a template rendered it
    with pytest.raises(AirflowException, match="positive"):
        options.build(Part, shell)


def test_a_typed_option_is_templated_and_its_doc_says_a_whole_expression_keeps_its_type():
    @dataclass(frozen=True, kw_only=True)
    class Typed:
        config: dict | None = option(None, "the run's config.", typed=True)

    declared = options.options_of(Typed)
    assert options.templated(declared) == ("config",) and options.typed(declared) == {"config"}
    assert "Templated; a value that is one whole ``{{ }}`` keeps its type." in options.param_docs(
        declared
    )

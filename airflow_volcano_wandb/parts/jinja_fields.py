"""The operator's templated fields that Airflow's Jinja must not render as text.

Airflow renders a templated field as text, so ``run_config={"epochs": "{{ params.epochs }}"}``
would hand the job ``"3"`` and a Launch job's ``range(wandb.config.epochs)`` would fail. In the
options declared ``typed`` (``parts/options.py``), a string that is exactly one
``{{ expression }}`` becomes what the expression evaluates to: ``Param(3, type="integer")``
gives ``3``, ``Param(0.05, type="number")`` ``0.05``, a string stays a string (even ``"007"``,
which a DAG's ``render_template_as_native_obj`` would read as a number). It is the rule the
template's own ``${name}`` macros and ``{{name}}`` variables follow when they are a whole
string. A value that is not JSON (a date) and a string with more around its expression
render as Airflow renders them, for either kind of DAG.

A template with W&B Launch template variables is not rendered at all: its ``{{name}}`` are
``render_job``'s to fill under their schemas.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jinja2 import Environment, TemplateSyntaxError

from airflow_volcano_wandb.parts.job_request import JobRequest
from airflow_volcano_wandb.parts.options import options_of, typed

#: The options whose whole ``{{ expression }}`` keeps its type.
TYPED_FIELDS = typed(options_of(JobRequest))
# One "{{ ... }}" and nothing around it; "}}" or "{{" inside means several expressions.
_WHOLE = re.compile(r"\{\{(?P<expression>(?:(?!\{\{|\}\}).)*)\}\}", re.DOTALL)


def _is_json(value: Any) -> bool:
    if value is None or isinstance(value, str | int | float):  # bool is an int
        return True
    if isinstance(value, list | tuple):
        return all(_is_json(item) for item in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json(v) for k, v in value.items())
    return False


def render_typed(
    value: Any,
    context: Mapping[str, Any],
    jinja_env: Environment,
    as_airflow: Callable[[Any], Any],
    seen_oids: set[int],
) -> Any:
    """``value`` rendered, each whole-expression string as the value it evaluates to; every
    other leaf by ``as_airflow`` (the task's own ``render_template``). ``seen_oids``: values
    Airflow marked as rendered already (a mapped task's expanded arguments)."""
    if id(value) in seen_oids:
        return value
    if isinstance(value, str) and (whole := _WHOLE.fullmatch(value)):
        try:
            evaluate = jinja_env.compile_expression(whole["expression"], undefined_to_none=False)
        except TemplateSyntaxError:  # "{{- x -}}" and the like: Airflow's rendering says
            return as_airflow(value)
        result = evaluate(**context)
        # An Undefined is not JSON either: Airflow's rendering raises or renders it as its
        # environment says.
        return result if _is_json(result) else as_airflow(value)
    if type(value) is dict:
        return {
            k: render_typed(v, context, jinja_env, as_airflow, seen_oids) for k, v in value.items()
        }
    if type(value) in (list, tuple):
        rendered = (render_typed(v, context, jinja_env, as_airflow, seen_oids) for v in value)
        return type(value)(rendered)
    return as_airflow(value)


def template_text(template: Any, template_ext: Sequence[str], jinja_env: Any) -> Any:
    """``template`` as written, not rendered by Jinja: the file's text when it names one."""
    if isinstance(template, str) and template.endswith(tuple(template_ext)):
        return jinja_env.loader.get_source(jinja_env, template)[0]
    return template


def render_own_fields(
    task: Any,
    template_fields: Sequence[str],
    context: Mapping[str, Any],
    jinja_env: Environment,
    seen_oids: set[int],
) -> list[str]:
    """Render in place those of the operator ``task``'s ``template_fields`` that Airflow must
    not render as text (see the module), and return the others, for Airflow to render."""

    def as_airflow(value: Any) -> Any:
        return task.render_template(value, context, jinja_env, seen_oids)

    rest = [name for name in template_fields if name not in TYPED_FIELDS]
    if task.template_variable_schemas is not None:
        rest = [name for name in rest if name != "template"]
        task.template = template_text(task.template, task.template_ext, jinja_env)
    for name in TYPED_FIELDS.intersection(template_fields):
        rendered = render_typed(getattr(task, name), context, jinja_env, as_airflow, seen_oids)
        setattr(task, name, rendered)
    return rest

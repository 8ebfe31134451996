"""Each option of the operator and the sensor, declared once, as Airflow's shells read it.

An option is a field of the frozen part it belongs to (``JobRequest``, ``WandbReport``,
``LogFollow``...), declared with :func:`option` (``template/options.py``, pure): its type, its
default, its doc line, whether Airflow templates it, the ``render_job`` keyword it fills, and
the check its value must pass. A shell's signature, its docstring's ``:param:`` lines, its
``template_fields`` (and which of them render typed, ``jinja_fields.py``) and its parse-time
checks are read off these declarations, and each part is built from the shell's flat
attributes once they are rendered (:func:`build`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.template.options import REQUIRED as REQUIRED
from airflow_volcano_wandb.template.options import Option, options_of
from airflow_volcano_wandb.template.options import option as option
from airflow_volcano_wandb.template.options import param_docs as param_docs
from airflow_volcano_wandb.template.options import passed_on as passed_on
from airflow_volcano_wandb.template.options import signature as signature

Part = TypeVar("Part")


def templated(options: Iterable[Option]) -> tuple[str, ...]:
    return tuple(o.name for o in options if o.templated)


def typed(options: Iterable[Option]) -> frozenset[str]:
    return frozenset(o.name for o in options if o.typed)


def renderers(options: Iterable[Option]) -> dict[str, str]:
    """A shell's ``template_fields_renderers``: each templated option that names one."""
    return {o.name: o.renderer for o in options if o.templated and o.renderer}


def take(options: Iterable[Option], kwargs: dict[str, Any]) -> dict[str, Any]:
    """Pop the ``options``' values from a shell's ``kwargs`` (their defaults when absent),
    checked unless Jinja is still to render them."""
    return {o.name: o.checked(kwargs.pop(o.name, o.default)) for o in options}


def init_shell(
    shell: Any, base_init: Callable[..., None], options: Iterable[Option], kwargs: dict
) -> None:
    """A shell's ``__init__``: the ``options`` (:func:`take`) become its attributes, the rest
    of ``kwargs`` goes to Airflow's ``base_init``."""
    given = take(options, kwargs)
    base_init(**kwargs)
    for name, value in given.items():
        setattr(shell, name, value)


def build(part: type[Part], task: Any, **more: Any) -> Part:
    """``part`` from the shell ``task``'s attributes, once Airflow rendered them: a templated
    option, unchecked at the DAG's parse, is checked now (a bad value fails the task)."""
    values: dict[str, Any] = {}
    for o in options_of(part):
        value = getattr(task, o.name)
        if o.templated:
            try:
                o.checked(value, rendered=True)
            except (TypeError, ValueError) as exc:
                raise AirflowException(str(exc)) from exc
        if o.held_in is None:
            values[o.name] = value
        else:  # passed on as it is (``passed_on``): held with the others in one mapping
            values.setdefault(o.held_in, {})[o.name] = value
    return part(**values, **more)


def render_kwargs(part: Any) -> dict[str, Any]:
    """The ``render_job`` keywords ``part``'s options fill, with their values."""
    return {
        o.render: getattr(part, o.name) if o.held_in is None else getattr(part, o.held_in)[o.name]
        for o in options_of(type(part))
        if o.render
    }

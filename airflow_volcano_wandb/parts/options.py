"""Each option of the operator and the sensor, declared once.

An option is a field of the frozen part it belongs to (``JobRequest``, ``WandbReport``,
``LogFollow``...), declared with :func:`option`: its type, its default, its doc line, whether
Airflow templates it, the ``render_job`` keyword it fills, and the check its value must pass.
A shell's signature, its docstring's ``:param:`` lines, its ``template_fields`` (and which
of them render typed, ``jinja_fields.py``) and its parse-time checks are read off these
declarations, and each part is built from the shell's flat attributes once they are
rendered (:func:`build`).
"""

from __future__ import annotations

import dataclasses
import inspect
import textwrap
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from airflow_volcano_wandb.airflow_compat import AirflowException

#: The default of an option a DAG must give.
REQUIRED: Any = inspect.Parameter.empty

Part = TypeVar("Part")


@dataclass(frozen=True)
class Option:
    """One parameter of a shell (see the module's docstring)."""

    name: str
    default: Any
    doc: str
    annotation: Any = inspect.Parameter.empty
    templated: bool = False
    #: The ``render_job`` keyword this option's value is handed to as it is, if any.
    render: str | None = None
    #: Refuses a bad value with ``ValueError``/``TypeError`` (a Jinja string is checked once
    #: rendered, when its part is built).
    check: Callable[[Any], Any] | None = None
    #: How the Airflow UI shows the rendered value ("json", "yaml"), for a templated option.
    renderer: str | None = None
    #: A templated option whose whole ``{{ expression }}`` strings keep the type they evaluate
    #: to (``parts/jinja_fields.py``): it carries data for ``wandb.config`` or the template.
    typed: bool = False

    def checked(self, value: Any) -> Any:
        if self.check is not None and not (self.templated and is_jinja(value)):
            self.check(value)
        return value


def option(
    default: Any,
    doc: str,
    *,
    templated: bool = False,
    render: str | bool = False,
    check: Callable[[Any], Any] | None = None,
    renderer: str | None = None,
    typed: bool = False,
) -> Any:
    """Declare the field of a part as an option (``render=True``: ``render_job`` takes it by
    the same name; a string: by that name; ``renderer``: how the UI shows it rendered;
    ``typed``: templated, and a whole ``{{ expression }}`` keeps its type)."""
    meta = {
        "doc": doc,
        "templated": templated or typed,
        "render": render,
        "check": check,
        "renderer": renderer,
        "typed": typed,
    }
    if default is REQUIRED:
        return dataclasses.field(metadata={"option": meta})
    return dataclasses.field(default=default, metadata={"option": meta})


def options_of(*parts: type) -> tuple[Option, ...]:
    """The options the ``parts`` (dataclasses) declare, in declaration order."""
    declared = []
    for part in parts:
        hints = inspect.get_annotations(part, eval_str=True)
        for field in dataclasses.fields(part):
            if (meta := field.metadata.get("option")) is None:
                continue
            render = field.name if meta["render"] is True else meta["render"] or None
            default = REQUIRED if field.default is dataclasses.MISSING else field.default
            declared.append(
                Option(
                    field.name,
                    default,
                    meta["doc"],
                    hints.get(field.name, inspect.Parameter.empty),
                    meta["templated"],
                    render,
                    meta["check"],
                    meta["renderer"],
                    meta["typed"],
                )
            )
    return tuple(declared)


def is_jinja(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def signature(options: Iterable[Option]) -> inspect.Signature:
    """The keyword-only signature a shell's ``__init__`` shows (``inspect.signature``, IDEs
    that ask the interpreter, Airflow's ``default_args`` and ``partial``/``expand``)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [
        inspect.Parameter(o.name, keyword, default=o.default, annotation=o.annotation)
        for o in options
    ]
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation=Any))
    return inspect.Signature(params, return_annotation=None)


def param_docs(options: Iterable[Option], indent: str = "") -> str:
    """The ``:param:`` lines of a shell's docstring, one per option, each ``indent``-ed."""
    lines = []
    for o in options:
        text = f":param {o.name}: {' '.join(o.doc.split())}"
        if o.typed:
            text += " Templated; a value that is one whole ``{{ }}`` keeps its type."
        elif o.templated:
            text += " Templated."
        lines.append(
            textwrap.fill(
                text,
                96,
                initial_indent=indent,
                subsequent_indent=indent + "    ",
                break_on_hyphens=False,
                break_long_words=False,
            )
        )
    return "\n".join(lines)


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


def build(part: type[Part], task: Any, **more: Any) -> Part:
    """``part`` from the shell ``task``'s attributes, once Airflow rendered them: a templated
    option, unchecked at the DAG's parse, is checked now (a bad value fails the task)."""
    values = {o.name: getattr(task, o.name) for o in options_of(part)}
    for o in options_of(part):
        if o.check is not None and o.templated:
            try:
                o.check(values[o.name])
            except (TypeError, ValueError) as exc:
                raise AirflowException(str(exc)) from exc
    return part(**values, **more)


def render_kwargs(part: Any) -> dict[str, Any]:
    """The ``render_job`` keywords ``part``'s options fill, with their values."""
    return {o.render: getattr(part, o.name) for o in options_of(type(part)) if o.render}

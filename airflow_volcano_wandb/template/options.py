"""Options declared once, as the fields of the frozen part they belong to.

A field declared with :func:`option` carries its type, default, doc line and check; a
signature (:func:`signature`) and ``:param:`` lines (:func:`param_docs`) are read off the
declarations (:func:`options_of`), for ``render_job``'s groups and the shells' parts alike.
Pure: no Airflow. What only the shells read (templated, typed, the UI's renderer) is carried
along for ``parts/options.py``.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import math
import textwrap
import types
import typing
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template.values import show

#: The default of an option a caller must give.
REQUIRED: Any = inspect.Parameter.empty


@dataclass(frozen=True)
class Option:
    """One declared parameter (see the module's docstring)."""

    name: str
    default: Any
    doc: str
    annotation: Any = inspect.Parameter.empty
    templated: bool = False
    #: The ``render_job`` keyword this option's value is handed to as it is, if any.
    render: str | None = None
    #: Refuses a bad value with ``ValueError``/``TypeError`` (a Jinja string is checked once
    #: rendered, when its part is built); a template group keeps what it returns.
    check: Callable[[Any], Any] | None = None
    #: How the Airflow UI shows the rendered value ("json", "yaml"), for a templated option.
    renderer: str | None = None
    #: A templated option whose whole ``{{ expression }}`` strings keep the type they evaluate
    #: to (``parts/jinja_fields.py``): it carries data for ``wandb.config`` or the template.
    typed: bool = False
    #: The field of a shell's part whose mapping holds this option's value, for an option
    #: declared in ``template/`` that the part passes on as it is (:func:`passed_on`).
    held_in: str | None = None

    def checked(self, value: Any, *, rendered: bool = False) -> Any:
        """``value`` when it passes the check, refused otherwise (Jinja still to render is
        checked once ``rendered``). An option with no check of its own is held to its declared
        type (a ``poll_interval`` of ``"abc"`` fails the DAG's parse, not the wait after a
        submit), but a templated ``render_job`` keyword: Jinja renders a number as text, which
        ``render_job`` reads."""
        if self.templated and is_jinja(value) and not rendered:
            return value
        if self.check is not None:
            self.check(value)
        elif not (self.templated and self.held_in):
            _check_type(self.name, self.annotation, value)
        return value


# What a declared type asks of a value, and how an error says it; a type not here (a mapping,
# a class of the provider's) is left to the option's own check or to ``render_job``.
_TYPES: dict[Any, tuple[Callable[[Any], bool], str]] = {
    bool: (lambda v: isinstance(v, bool), "True or False"),
    int: (lambda v: type(v) is int and v >= 0, "a whole number, 0 or more"),
    float: (
        lambda v: isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < math.inf,
        "a number, 0 or more",
    ),
    str: (lambda v: isinstance(v, str), "a string"),
    Mapping[str, Any]: (lambda v: isinstance(v, Mapping), "a mapping"),
    Sequence[str]: (
        lambda v: isinstance(v, list | tuple) and all(isinstance(i, str) for i in v),
        "a list of strings",
    ),
}


def _check_type(name: str, annotation: Any, value: Any) -> None:
    kinds = typing.get_args(annotation) if isinstance(annotation, types.UnionType) else ()
    kinds = kinds or (annotation,)
    if value is None and type(None) in kinds:
        return
    known = [_TYPES[kind] for kind in kinds if kind in _TYPES]
    if len(known) != len([kind for kind in kinds if kind is not type(None)]):
        return
    if not any(fits(value) for fits, _ in known):
        said = " or ".join([said for _, said in known] + ["None"] * (type(None) in kinds))
        raise TypeError(f"{name} must be {said}, not {show(value)}")


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


def passed_on(declared: Iterable[Option]) -> Any:
    """Declare a shell part's field holding, in one mapping by name, the values of options
    declared in ``template/`` that the part hands to ``render_job`` as they are (its
    ``render=``), so each keeps its one declaration there. An option the part renames (one of
    its own options' ``render=``) is not passed on as well. A templated one is checked at
    render, as it may be Jinja until then; the others when the shell is built."""
    return dataclasses.field(default_factory=dict, metadata={"passed_on": tuple(declared)})


def options_of(*parts: type) -> tuple[Option, ...]:
    """The options the ``parts`` (dataclasses) declare, in declaration order (read once)."""
    return _declared(*parts)


# Cached behind options_of: mypy types a dataclass's class object by the instances' __hash__
# (None, eq without frozen) when it is passed where Hashable is asked, though a class is
# hashable; through a `type` parameter it is not asked.
@functools.cache
def _declared(*parts: type) -> tuple[Option, ...]:
    declared = []
    for part in parts:
        hints = inspect.get_annotations(part, eval_str=True)
        renamed = {
            meta["render"] for f in dataclasses.fields(part) if (meta := f.metadata.get("option"))
        }
        for field in dataclasses.fields(part):
            if (passed := field.metadata.get("passed_on")) is not None:
                declared += [
                    dataclasses.replace(
                        o,
                        render=o.name,
                        check=None if o.templated else o.check,
                        held_in=field.name,
                    )
                    for o in passed
                    if o.name not in renamed
                ]
                continue
            if (meta := field.metadata.get("option")) is None:
                continue
            render = field.name if meta["render"] is True else meta["render"] or None
            default = REQUIRED if field.default is dataclasses.MISSING else field.default
            hint = hints.get(field.name, inspect.Parameter.empty)
            declared.append(
                Option(field.name, default, annotation=hint, **{**meta, "render": render})
            )
    return tuple(declared)


def keep_checked(part: Any) -> None:
    """Check each option of the frozen ``part`` in declaration order, keeping the value its
    check returns (a template group's ``__post_init__``: the first bad one raises)."""
    for o in options_of(type(part)):
        if o.check is not None:
            object.__setattr__(part, o.name, o.check(getattr(part, o.name)))


def is_jinja(value: Any) -> bool:
    return isinstance(value, str) and "{{" in value


def signature(
    options: Iterable[Option], *, of: Callable[..., Any] | None = None
) -> inspect.Signature:
    """The keyword-only signature the options make: after ``of``'s own parameters (but its
    ``**``) with its return type, for a function that takes them as ``**kwargs``; without
    ``of``, a shell's ``__init__``: ``self``, the options and ``**kwargs`` (``inspect.signature``,
    IDEs that ask the interpreter, Airflow's ``default_args`` and ``partial``/``expand``)."""
    keyword = inspect.Parameter.KEYWORD_ONLY
    declared = [
        inspect.Parameter(o.name, keyword, default=o.default, annotation=o.annotation)
        for o in options
    ]
    if of is not None:
        own = inspect.signature(of, eval_str=True)
        head = [p for p in own.parameters.values() if p.kind is not inspect.Parameter.VAR_KEYWORD]
        return own.replace(parameters=head + declared)
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD), *declared]
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation=Any))
    return inspect.Signature(params, return_annotation=None)


def param_docs(options: Iterable[Option], indent: str = "", *, shell: bool = True) -> str:
    """The ``:param:`` lines of a docstring, one per option, each ``indent``-ed; a ``shell``'s
    say which are templated."""
    lines = []
    for o in options:
        text = f":param {o.name}: {' '.join(o.doc.split())}"
        if shell and o.typed:
            text += " Templated; a value that is one whole ``{{ }}`` keeps its type."
        elif shell and o.templated:
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

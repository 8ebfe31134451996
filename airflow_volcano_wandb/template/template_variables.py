"""W&B Launch queue template variables: ``{{name}}`` in a queue config, bounded by a schema.

A queue's admin gives each variable a schema (``type`` integer, number or string;
``minimum``, ``maximum``, ``enum``, ``default``, ``description``), which
``wandb.Api().run_queue(entity, name).template_variables`` returns as ``[{"name",
"schema"}]``. The same list bounds ``render_job``'s ``template_variables`` and makes an
Airflow Trigger form (:func:`param_specs`). Filling works on the parsed tree, as the
``${macro}`` stage does: a value is data, never YAML or JSON structure, and never a
``${macro}``. Pure: no Airflow.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple, overload

from airflow_volcano_wandb.template.errors import Path, TemplateError, error_at, errors_at
from airflow_volcano_wandb.template.macros import MACRO_NAME
from airflow_volcano_wandb.template.values import as_text, show, type_name

TYPES = ("integer", "number", "string")
#: Keys a schema may have. Anything else (``pattern``, ``minLength``...) would be a guardrail
#: this provider does not enforce, so it is refused rather than silently dropped.
_SCHEMA_KEYS = frozenset({"type", "minimum", "maximum", "enum", "default", "description", "title"})
_VARIABLE = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")
_INTEGER_TEXT = re.compile(r"[+-]?[0-9]{1,18}\Z")
_MISSING = object()


def _where(name: str) -> tuple[str, str]:
    return ("template_variables", name)


@dataclass(frozen=True)
class VariableSchema:
    """One variable's guardrails, checked. ``default`` is :data:`_MISSING` when there is none."""

    name: str
    type: str
    minimum: int | float | None = None
    maximum: int | float | None = None
    enum: tuple[Any, ...] | None = None
    default: Any = _MISSING
    description: str | None = None
    title: str | None = None

    @property
    def has_default(self) -> bool:
        return self.default is not _MISSING

    def check(self, value: Any) -> int | float | str:
        """``value`` as this variable's type (a digit string is an integer: Jinja renders
        text), or a :class:`TemplateError` naming the variable and the bound it breaks."""
        typed = _typed(self, value)
        if self.minimum is not None and typed < self.minimum:  # type: ignore[operator]
            broken = f"below its minimum {show(self.minimum)}"
        elif self.maximum is not None and typed > self.maximum:  # type: ignore[operator]
            broken = f"above its maximum {show(self.maximum)}"
        elif self.enum is not None and typed not in self.enum:
            broken = f"not one of its enum {', '.join(show(e) for e in self.enum)}"
        else:
            return typed
        raise error_at(
            _where(self.name), f"template variable {self.name!r} is {show(typed)}, {broken}"
        )


def _typed(schema: VariableSchema, value: Any) -> int | float | str:
    name, kind = schema.name, schema.type
    wrong = error_at(
        _where(name),
        f"template variable {name!r} must be {'an' if kind == 'integer' else 'a'} {kind}, "
        f"got {type_name(value)} {show(value)}",
    )
    if isinstance(value, bool):
        raise wrong
    if kind == "string":
        if not isinstance(value, str):
            raise wrong
        return value
    if isinstance(value, str):
        text = value.strip()
        if _INTEGER_TEXT.match(text):
            return int(text)
        if kind == "integer":
            raise wrong
        try:
            value = float(text)
        except ValueError:
            raise wrong from None
    if kind == "integer" and not isinstance(value, int):
        raise wrong
    if not isinstance(value, int | float) or (
        isinstance(value, float) and not math.isfinite(value)
    ):
        raise wrong
    return value


def _bound(name: str, schema: Mapping[str, Any], key: str, kind: str) -> int | float | None:
    value = schema.get(key)
    if value is None:
        return None
    if kind == "string" or isinstance(value, bool) or not isinstance(value, int | float):
        raise error_at(
            _where(name),
            f"the schema of template variable {name!r} has {key} {show(value)}; only an "
            "integer or number variable has a numeric bound",
        )
    bound: int | float = value  # checked just above
    return bound


def _schema(entry: Any, index: int) -> VariableSchema:
    where: tuple[str | int, ...] = ("template_variable_schemas", index)
    if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
        raise error_at(where, f"must be a mapping with a 'name' and a 'schema', got {show(entry)}")
    name, raw = entry["name"], entry.get("schema")
    if not MACRO_NAME.match(name):
        raise error_at(where, f"template variable name {name!r} must match [A-Za-z_][A-Za-z0-9_]*")
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except ValueError as exc:
            raise error_at(_where(name), f"its schema is not JSON: {exc}") from None
    if not isinstance(raw, Mapping):
        raise error_at(_where(name), f"its schema must be a mapping, got {type_name(raw)}")
    unknown = sorted(set(raw) - _SCHEMA_KEYS)
    if unknown:
        raise error_at(
            _where(name),
            f"the schema of template variable {name!r} has {', '.join(map(repr, unknown))}, "
            f"which this provider does not enforce (it knows {', '.join(sorted(_SCHEMA_KEYS))})",
        )
    kind = raw.get("type")
    if kind not in TYPES:
        raise error_at(
            _where(name),
            f"the schema of template variable {name!r} has type {show(kind)}; W&B's types are "
            + ", ".join(TYPES),
        )
    enum = raw.get("enum")
    if enum is not None and (not isinstance(enum, list) or not enum):
        raise error_at(
            _where(name), f"the schema's enum must be a non-empty list, got {show(enum)}"
        )
    bare = VariableSchema(
        name,
        kind,
        _bound(name, raw, "minimum", kind),
        _bound(name, raw, "maximum", kind),
        **{key: raw[key] for key in ("description", "title") if isinstance(raw.get(key), str)},
    )
    checked_enum = None if enum is None else tuple(_typed(bare, item) for item in enum)
    schema = replace(bare, enum=checked_enum)
    if "default" in raw and raw["default"] is not None:
        try:
            default = schema.check(raw["default"])
        except TemplateError as exc:
            raise error_at(
                _where(name), f"its default breaks its own bounds: {exc.problems[0][1]}"
            ) from None
        schema = replace(schema, default=default)
    return schema


def parse_schemas(schemas: Sequence[Any] | None) -> dict[str, VariableSchema]:
    """The schemas as W&B returns them (``[{"name", "schema"}]``, a schema a dict or a JSON
    string), checked, by name. ``None`` is no schemas."""
    if schemas is None:
        return {}
    if isinstance(schemas, str | bytes | Mapping) or not isinstance(schemas, Sequence):
        raise TemplateError(
            "template_variable_schemas must be a list of {'name', 'schema'}, as "
            f"wandb.Api().run_queue(...).template_variables returns it; got {type_name(schemas)}"
        )
    parsed: dict[str, VariableSchema] = {}
    for index, entry in enumerate(schemas):
        schema = _schema(entry, index)
        if schema.name in parsed:
            raise error_at(_where(schema.name), "declared twice in template_variable_schemas")
        parsed[schema.name] = schema
    return parsed


def _mapping_or_empty(values: Any) -> Mapping[str, Any]:
    if values is None:
        return {}
    if not isinstance(values, Mapping):
        raise TemplateError(f"template_variables must be a mapping, not {type_name(values)}")
    return values


def bind(schemas: Mapping[str, VariableSchema], values: Mapping[str, Any] | None) -> dict[str, Any]:
    """Every declared variable's value, checked against its schema (``None`` or no value: the
    default). All problems are reported together; a value for an undeclared variable is one."""
    values = _mapping_or_empty(values)
    declared = ", ".join(schemas) or "none"
    problems: list[tuple[Path, str]] = [
        (_where(str(name)), f"the template has no variable {name!r} (it has: {declared})")
        for name in values
        if name not in schemas
    ]
    bound: dict[str, Any] = {}
    for name, schema in schemas.items():
        value = values.get(name)
        if value is None and not schema.has_default:
            problems.append(
                (_where(name), f"template variable {name!r} has no value and no default")
            )
            continue
        try:
            bound[name] = schema.default if value is None else schema.check(value)
        except TemplateError as exc:
            problems.append((_where(name), exc.problems[0][1]))
    if problems:
        raise errors_at(
            problems,
            f"the template variables break the queue's guardrails ({len(problems)} problem(s))",
        )
    return bound


class Filled(NamedTuple):
    """A field the template variables filled: ``whole`` when one variable is all of its value
    (that variable's schema can judge any other value there), else the variables in its text."""

    variables: tuple[VariableSchema, ...]
    whole: bool


class _Filling:
    """One walk that copies the template and fills ``{{name}}`` in; names it does not know are
    collected and reported together, and the fields it fills are recorded."""

    def __init__(self, values: Mapping[str, Any], schemas: Mapping[str, VariableSchema]) -> None:
        self.values = values
        self.schemas = schemas
        self.unknown: dict[str, Path] = {}
        self.filled: dict[Path, Filled] = {}

    def string(self, text: str, path: Path) -> Any:
        if "{{" not in text:
            return text
        whole = _VARIABLE.fullmatch(text)
        if whole and whole.group(1) in self.values:
            self.filled[path] = Filled((self.schemas[whole.group(1)],), True)
            return _escape(self.values[whole.group(1)])
        names: list[str] = []

        def one(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in self.values:
                self.unknown.setdefault(name, path)
                return match.group(0)
            names.append(name)
            what = f"template variable {{{{{name}}}}}"
            return _escape(as_text(self.values[name], path, what))

        filled = _VARIABLE.sub(one, text)
        if names:
            variables = tuple(self.schemas[name] for name in dict.fromkeys(names))
            self.filled[path] = Filled(variables, False)
        return filled

    def walk(self, node: Any, path: Path) -> Any:
        if isinstance(node, str):
            return self.string(node, path)
        if isinstance(node, Mapping):
            out = {}
            for key, item in node.items():
                if isinstance(key, str) and _VARIABLE.search(key):
                    raise error_at(
                        (*path, key),
                        "template variables are not filled in keys; move it to a value",
                    )
                out[key] = self.walk(item, (*path, key))
            return out
        if isinstance(node, list | tuple):
            return [self.walk(item, (*path, i)) for i, item in enumerate(node)]
        return node


@overload
def _escape(value: str) -> str: ...
@overload
def _escape(value: object) -> object: ...
def _escape(value: object) -> object:
    """A value is data: the ``${macro}`` stage after this one must leave a ``${`` in it as
    written, so it is escaped the way a template writes a literal one."""
    return value.replace("${", "$${") if isinstance(value, str) else value


def fill(
    template: Mapping[str, Any], values: Mapping[str, Any], schemas: Mapping[str, VariableSchema]
) -> tuple[dict[str, Any], dict[Path, Filled]]:
    """A copy of ``template`` with every ``{{name}}`` filled from ``values`` (see :func:`bind`),
    and where: each filled field's variables, and whether one of them is its whole value.

    :raises TemplateError: for a ``{{name}}`` no schema declares, with every place found.
    """
    filling = _Filling(values, schemas)
    try:
        result = filling.walk(template, ())
    except RecursionError:
        raise TemplateError("the template is nested too deeply") from None
    if filling.unknown:
        raise errors_at(
            [
                (
                    path,
                    f"template variable {{{{{name}}}}} has no schema; the template's "
                    f"variables are: {', '.join(values) or 'none'}",
                )
                for name, path in filling.unknown.items()
            ],
            "the template uses template variables no schema declares",
        )
    return result, filling.filled


def render_variables(
    template: Mapping[str, Any], values: Mapping[str, Any] | None, schemas: Sequence[Any] | None
) -> tuple[Mapping[str, Any], dict[Path, Filled]]:
    """``render_job``'s template-variable stage: the template filled in, or the template as it
    is when there are no schemas and no values (a template without variables); and the fields
    the variables filled, for ``guardrails`` to hold the overrides to."""
    given = _mapping_or_empty(values)
    if schemas is None:
        if given:
            raise error_at(
                ("template_variables",),
                f"values for {', '.join(map(repr, given))} but no template_variable_schemas: "
                "the template has no variables",
            )
        return template, {}
    parsed = parse_schemas(schemas)
    return fill(template, bind(parsed, given), parsed)


def param_specs(schemas: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """Keyword arguments of an Airflow ``Param`` per variable, in the schemas' order: the
    JSON-schema keys the Trigger form enforces (``type``, ``minimum``, ``maximum``, ``enum``)
    and shows (``default``, ``description``, ``title``). No default: the form asks for one."""
    specs: dict[str, dict[str, Any]] = {}
    for name, schema in parse_schemas(schemas).items():
        spec = {
            "type": schema.type,
            "default": schema.default,
            "minimum": schema.minimum,
            "maximum": schema.maximum,
            "enum": None if schema.enum is None else list(schema.enum),
            "description": schema.description,
            "title": schema.title,
        }
        # A default is never None (a None default is no default, :data:`_MISSING`).
        specs[name] = {k: v for k, v in spec.items() if v is not None and v is not _MISSING}
    return specs

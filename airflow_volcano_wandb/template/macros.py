"""``${name}`` macros: one structural pass that copies the template and fills them in.

Substitution works on the parsed tree, string by string. A value is inserted as data and is
never parsed or scanned again, so a value such as ``"x\\nspec: {evil: 1}"``, ``"{{ 7*7 }}"`` or
``"${other}"`` stays one literal string in one place.

W&B's agent fills any other ``${NAME}`` from its own environment. Here only the names listed
in ``macros_from_env`` are, from the environment of the process that renders: the rest of it,
secrets included, never reaches a job spec. Errors name macros, never their values.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from airflow_volcano_wandb.template.errors import (
    Path,
    TemplateError,
    error_at,
    format_path,
)
from airflow_volcano_wandb.template.values import (
    INT64_MAX,
    INT64_MIN,
    as_text,
    clone,
    copy_json,
    has_wide_int,
    show,
    type_name,
)

#: The macros W&B Launch fills in; the caller supplies their values in ``macros``.
BUILTIN_MACROS: tuple[str, ...] = (
    "image_uri",
    "run_id",
    "run_name",
    "entity_name",
    "project_name",
    "author",
)

MACRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# "$${" is the escape for a literal "${"; it must be matched before "${" at the same place.
_OPENING = re.compile(r"\$\$\{|\$\{")
_NAME_AND_CLOSE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\}")
_WHOLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}\Z")
# A YAML alias bomb expands to shared references that a copy would blow up; no real Volcano
# Job comes near this many nodes (a 1000-task job is about 30k).
MAX_NODES = 500_000


# The walk keeps its position as a linked list ``(parent, key)`` and flattens it only for an
# error message: building a full path tuple for every node would dominate the render time.
Link = tuple[Any, str | int] | None


def flatten(link: Link) -> Path:
    parts: list[str | int] = []
    while link is not None:
        link, key = link
        parts.append(key)
    return tuple(reversed(parts))


class _Substitution:
    def __init__(self, macros: Mapping[str, Any]) -> None:
        self.macros = macros
        self.checked: dict[str, tuple[Any, bool]] = {}
        self.unknown: dict[str, Link] = {}
        #: Where a whole-string macro put an integer beyond int64; checked after normalization
        #: (which turns it into text if the field is a string field).
        self.wide: list[Path] = []
        self.nodes = 0

    def value(self, name: str, link: Link) -> tuple[Any, bool] | None:
        """The macro's value and whether it holds a wide int, checked once; ``None`` (after
        recording the name) when unknown."""
        if name in self.checked:
            return self.checked[name]
        if name not in self.macros:
            self.unknown.setdefault(name, link)
            return None
        raw = self.macros[name]
        path = flatten(link)
        if raw is None:
            raise error_at(path, f"macro ${{{name}}} is None; give it a value")
        value = copy_json(raw, path, f"macro ${{{name}}}")
        self.checked[name] = (value, has_wide_int(value))
        return self.checked[name]

    def string(self, text: str, link: Link) -> Any:
        if "$" not in text:  # the common case, kept cheap
            return text
        whole = _WHOLE.match(text)
        if whole:
            found = self.value(whole.group(1), link)
            if found is None:
                return text
            value, wide = found
            if wide:
                self.wide.append(flatten(link))
            # A fresh copy per use: two places must never share one mutable object.
            return clone(value)
        out: list[str] = []
        pos = 0
        for opening in _OPENING.finditer(text):
            start = opening.start()
            if start < pos:  # inside a macro already consumed
                continue
            out.append(text[pos:start])
            if opening.group() == "$${":
                out.append("${")
                pos = opening.end()
                continue
            name = _NAME_AND_CLOSE.match(text, opening.end())
            if not name:
                snippet = text[start : start + 24]
                raise error_at(
                    flatten(link),
                    f"malformed macro starting {snippet!r}: write ${{name}} with name matching "
                    "[A-Za-z_][A-Za-z0-9_]*, or $${ for a literal ${",
                )
            found = self.value(name.group(1), link)
            if found is not None:
                out.append(as_text(found[0], flatten(link), f"macro ${{{name.group(1)}}}"))
            pos = name.end()
        out.append(text[pos:])
        return "".join(out)

    def walk(self, node: Any, link: Link) -> Any:
        kind = type(node)
        if kind is str:
            return self.string(node, link)
        if kind is dict or isinstance(node, Mapping):
            self.count(len(node))
            out = {}
            for key, item in node.items():
                if type(key) is not str:
                    raise error_at(flatten(link), f"keys must be strings, found {show(key)}")
                if "${" in key:
                    raise error_at(
                        flatten((link, key)),
                        "macros are not substituted in keys; move it to a value",
                    )
                # Plain strings are most of a manifest; handling them inline, without a call
                # per value, is what keeps a 100-task job fast.
                if type(item) is str and "$" not in item:
                    out[key] = item
                else:
                    out[key] = self.walk(item, (link, key))
            return out
        if kind is list or kind is tuple:
            self.count(len(node))
            return [
                item if type(item) is str and "$" not in item else self.walk(item, (link, i))
                for i, item in enumerate(node)
            ]
        if kind is int:
            if not INT64_MIN <= node <= INT64_MAX:
                raise error_at(flatten(link), "integer out of the int64 range Kubernetes accepts")
            return node
        if kind is bool or node is None:
            return node
        return copy_json(node, flatten(link))  # floats are checked there; other types refused

    def count(self, size: int) -> None:
        self.nodes += size
        if self.nodes > MAX_NODES:
            raise TemplateError(f"the template has more than {MAX_NODES} values; refusing it")


def check_macro_names(macros: Mapping[str, Any]) -> None:
    if not isinstance(macros, Mapping):
        raise TemplateError(f"macros must be a mapping of name to value, not {type_name(macros)}")
    bad = [show(name) for name in macros if not isinstance(name, str) or not MACRO_NAME.match(name)]
    if bad:
        raise TemplateError(
            f"invalid macro name(s) {', '.join(bad)}: names match [A-Za-z_][A-Za-z0-9_]*"
        )


def macros_from_env_names(names: Sequence[str] | None) -> tuple[str, ...]:
    """``macros_from_env`` checked: exact macro names (not patterns), none a built-in."""
    if names is None:
        return ()
    if isinstance(names, str | bytes) or not isinstance(names, Sequence):
        raise TemplateError(f"macros_from_env must be a list of names, not {type_name(names)}")
    bad = [show(n) for n in names if not isinstance(n, str) or not MACRO_NAME.match(n)]
    if bad:
        raise TemplateError(
            f"macros_from_env takes names, not patterns: {', '.join(bad)} (a name matches "
            "[A-Za-z_][A-Za-z0-9_]*)"
        )
    builtin = [n for n in names if n in BUILTIN_MACROS]
    if builtin:
        raise TemplateError(
            f"macros_from_env names the built-in macro(s) {', '.join(builtin)}, which the run "
            "fills; they cannot come from the environment"
        )
    return tuple(names)


def substitute(
    template: Mapping[str, Any], macros: Mapping[str, Any], from_env: Collection[str] = ()
) -> tuple[dict[str, Any], list[Path]]:
    """Return a fresh copy of ``template`` with every ``${name}`` filled in, and the paths
    where a whole-string macro inserted an integer beyond int64 (for validation to check).

    A string that is exactly ``${name}`` becomes the value itself, with its type (a number,
    a boolean, a list or a mapping, copied). Inside a longer string the value is formatted
    by :func:`~airflow_volcano_wandb.template.values.as_text`. ``$${`` gives a literal
    ``${``. ``from_env`` (checked by :func:`macros_from_env_names`): names filled from this
    process's environment where ``macros`` has none. Unknown names are collected and
    reported together with the known ones.
    """
    check_macro_names(macros)
    environment = {name: os.environ[name] for name in from_env if name in os.environ}
    macros = {**environment, **macros}
    sub = _Substitution(macros)
    try:
        result = sub.walk(template, None)
    except RecursionError:
        raise TemplateError("the template is nested too deeply") from None
    if sub.unknown:

        def where(names: list[str]) -> str:
            return ", ".join(f"${{{n}}} at {format_path(flatten(sub.unknown[n]))}" for n in names)

        missing = [name for name in sub.unknown if name in BUILTIN_MACROS]
        unset = [name for name in sub.unknown if name in from_env]
        unknown = [name for name in sub.unknown if name not in (*BUILTIN_MACROS, *from_env)]
        known = sorted(set(BUILTIN_MACROS) | set(macros))
        parts = []
        if unknown:
            parts.append(
                f"unknown macro(s): {where(unknown)} (one the environment of the process that "
                "renders should fill must be listed in macros_from_env)"
            )
        if unset:
            parts.append(
                f"macro(s) listed in macros_from_env but not set in the environment of the "
                f"process that renders: {where(unset)}"
            )
        if missing:
            parts.append(f"built-in macro(s) without a value for this run: {where(missing)}")
        parts.append(f"known macros: {', '.join(known)} (write $${{name}} for a literal ${{name}})")
        raise TemplateError(
            "; ".join(parts),
            problems=[
                (format_path(flatten(p)), f"unknown macro ${{{n}}}") for n, p in sub.unknown.items()
            ],
        )
    return result, sub.wide

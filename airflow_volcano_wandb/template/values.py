"""JSON-shaped values: checking, copying, and formatting scalars as text.

A Volcano Job is sent to the API server as JSON, so everything the renderer produces must be
JSON: dicts with string keys, lists, strings, finite numbers, booleans and ``None``. Checking
that once, while copying, keeps the later stages free of type surprises.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from airflow_volcano_wandb.template.errors import Path, error_at

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


def type_name(value: object) -> str:
    return type(value).__name__


def show(value: object, limit: int = 60) -> str:
    """A short repr for error messages that never fails (huge ints refuse to print)."""
    try:
        text = repr(value)
    except ValueError:
        return f"<{type_name(value)} too large to print>"
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def as_text(value: Any, path: Path, what: str = "value") -> str:
    """Format a scalar for a place where Kubernetes wants a string.

    Booleans become ``true``/``false`` (how YAML and Go spell them, so ``--flag=${on}`` reads
    the same as in a hand-written manifest), integers their decimal digits, floats their
    shortest round-trip repr (``0.001``, ``1e-05``). ``None``, NaN/infinity, containers and
    other types are errors rather than text such as ``"None"``.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        try:
            return str(value)
        except ValueError:  # CPython refuses to print ints of more than 4300 digits
            raise error_at(path, f"{what} is an integer too large to format") from None
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error_at(path, f"{what} is {value!r}, which is not a finite number")
        return repr(value)
    if value is None:
        raise error_at(path, f"{what} is None; pass a string (None is never turned into text)")
    if isinstance(value, Mapping | list | tuple):
        raise error_at(
            path, f"{what} is a {type_name(value)}, which cannot be formatted inside a string"
        )
    raise error_at(path, f"{what} has type {type_name(value)}; expected a string or a number")


def flag(argument: str) -> Callable[[Any], bool]:
    """The check of a ``render_job`` keyword that is True or False."""

    def check(value: Any) -> bool:
        if type(value) is not bool:
            raise error_at((argument,), f"must be True or False, not {show(value)}")
        return value

    return check


def copy_json(value: Any, path: Path, what: str = "value") -> Any:
    """Deep-copy a JSON-shaped value, rejecting anything that is not JSON.

    Tuples are accepted as lists. Integers are not range-checked here: a huge integer may
    still become text; the final validation checks the ones that stay numbers.
    """
    if isinstance(value, str | bool | int) or value is None:
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise error_at(path, f"{what} contains {value!r}, which JSON cannot carry")
        return value
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise error_at(path, f"{what} has a non-string key {show(key)}")
            out[key] = copy_json(item, (*path, key), what)
        return out
    if isinstance(value, list | tuple):
        return [copy_json(item, (*path, i), what) for i, item in enumerate(value)]
    raise error_at(path, f"{what} has type {type_name(value)}, which JSON cannot carry")


def has_wide_int(value: Any) -> bool:
    """True when ``value`` holds an integer outside int64 (fine as text, not as a number)."""
    if type(value) is int:
        return not INT64_MIN <= value <= INT64_MAX
    if isinstance(value, dict):
        return any(has_wide_int(v) for v in value.values())
    if isinstance(value, list):
        return any(has_wide_int(v) for v in value)
    return False


def clone(value: Any) -> Any:
    """Deep-copy a value already known to be JSON (no checks, so cheap)."""
    kind = type(value)
    if kind is dict:
        return {key: clone(item) for key, item in value.items()}
    if kind is list:
        return [clone(item) for item in value]
    return value


def as_int(value: Any, path: Path, what: str, *, maximum: int | None = None) -> int:
    """Read a non-negative count: an ``int`` or a string of ASCII digits (Airflow's trigger
    form sends strings). Booleans, floats (even ``3.0``), signs, ``""`` and ``None`` are
    errors, as is anything above ``maximum``."""
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise error_at(
            path, f"{what} must be a non-negative integer, got {type_name(value)} {show(value)}"
        )
    if isinstance(value, str):
        text = value.strip()
        if not text.isascii() or not text.isdigit():
            raise error_at(path, f"{what} must be a non-negative integer, got {show(value)}")
        # Long digit strings are over any bound; checking length first also keeps int() from
        # hitting CPython's 4300-digit conversion limit.
        if len(text) > 18:
            raise error_at(path, f"{what} is {text[:20]}..., which is too large")
        value = int(text)
    if value < 0:
        raise error_at(path, f"{what} must be >= 0, got {show(value)}")
    if maximum is not None and value > maximum:
        raise error_at(path, f"{what} is {show(value)}, above the allowed maximum of {maximum}")
    if value > INT64_MAX:
        raise error_at(path, f"{what} is too large")
    count: int = value  # an int by now: a string was converted, anything else raised
    return count


def dig(node: Any, *keys: str) -> Any:
    """``node[k1][k2]...``, or ``None`` where a level is missing or not a mapping: for reading
    a template that validation has not vouched for yet."""
    for key in keys:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node


def indexed(node: Any) -> list[tuple[int, Any]]:
    """``(index, item)`` of a list, or nothing when ``node`` is not a list."""
    return list(enumerate(node)) if isinstance(node, list) else []

"""The queue admin's guardrails hold against the run's overrides too.

W&B Launch drops a launch's resource overrides when its queue has template variables; here an
override (replicas, image, env, resources, command, args, metadata) of a field a variable
filled is honoured when that variable's schema (``template_variables.py``) accepts the new
value, and refused otherwise, naming the variable, its bound and the override. A field a
variable fills only part of, or one an override removes, cannot be judged: any change there
is refused. Pure: no Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_volcano_wandb.template.errors import Path, Problems, TemplateError, errors_at
from airflow_volcano_wandb.template.template_variables import Filled
from airflow_volcano_wandb.template.values import show

_ABSENT = object()


def _at(node: Any, path: Path) -> Any:
    for key in path:
        if isinstance(key, int):
            if not isinstance(node, list) or key >= len(node):
                return _ABSENT
        elif not isinstance(node, Mapping) or key not in node:
            return _ABSENT
        node = node[key]
    return node


def _same(a: Any, b: Any) -> bool:
    return type(a) is type(b) and a == b


def _judged(filled: Filled, value: Any, override: str) -> str | None:
    """Why ``override``'s ``value`` in a field ``filled`` by variables is refused, or None."""
    names = " and ".join(repr(v.name) for v in filled.variables)
    if value is _ABSENT:
        return f"the {override} override removes what template variable {names} fills"
    if not filled.whole:
        return (
            f"the {override} override sets {show(value)} where template variable {names} "
            "fills part of the text, which no schema can judge"
        )
    try:
        filled.variables[0].check(value)
    except TemplateError as exc:
        return f"the {override} override sets {show(value)}: {exc.problems[0][1]}"
    return None


class Guardrails:
    """The fields the template variables filled, held to their schemas while the overrides
    apply: :meth:`judge` after each override, :meth:`check` once they all did."""

    def __init__(self, job: Mapping[str, Any], filled: Mapping[Path, Filled]) -> None:
        self._filled = filled
        self._held = {path: _at(job, path) for path in filled}
        self._problems: Problems = []

    def judge(self, job: Mapping[str, Any], override: str) -> None:
        """Judge what the override just applied changed in the filled fields."""
        for path, filled in self._filled.items():
            value = _at(job, path)
            if _same(value, self._held[path]):
                continue
            self._held[path] = value
            if (problem := _judged(filled, value, override)) is not None:
                self._problems.append((path, problem))

    def check(self) -> None:
        """:raises TemplateError: with every override that stepped over a guardrail."""
        if self._problems:
            raise errors_at(
                self._problems,
                f"the overrides step over the queue's template variable guardrails "
                f"({len(self._problems)} problem(s)); an override may change a field a "
                "variable fills only within that variable's schema",
            )

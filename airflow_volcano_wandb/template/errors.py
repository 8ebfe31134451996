"""The renderer's one exception type, and JSON-path formatting for its messages."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence

Path = tuple[str | int, ...]
Problems = list[tuple[Path, str]]

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class TemplateError(ValueError):
    """A queue template, a macro value or an override is invalid.

    ``problems`` holds every ``(json_path, message)`` found (validation reports all of them
    at once); ``path`` is the first one's path, or ``None`` when the template as a whole is
    wrong. ``str(error)`` is a readable summary that names each path.
    """

    def __init__(self, message: str, *, problems: Sequence[tuple[str, str]] = ()) -> None:
        super().__init__(message)
        self.problems: tuple[tuple[str, str], ...] = tuple(problems)
        self.path: str | None = self.problems[0][0] if self.problems else None


def format_path(path: Path) -> str:
    """Render ``("spec", "tasks", 1, "replicas")`` as ``spec.tasks[1].replicas``.

    Keys that are not plain identifiers are quoted: ``metadata.labels["app.kubernetes.io/x"]``.
    """
    out: list[str] = []
    for part in path:
        if isinstance(part, int):
            out.append(f"[{part}]")
        elif _PLAIN_KEY.match(part):
            out.append(f".{part}" if out else part)
        else:
            out.append(f"[{json.dumps(part, ensure_ascii=False)}]")
    return "".join(out) or "<template>"


def error_at(path: Path, message: str) -> TemplateError:
    """A single-problem error whose text starts with the JSON path."""
    where = format_path(path)
    return TemplateError(f"{where}: {message}", problems=[(where, message)])


def errors_at(problems: Iterable[tuple[Path, str]], summary: str) -> TemplateError:
    """One error carrying several problems, one per line under ``summary``."""
    formatted = [(format_path(path), message) for path, message in problems]
    lines = "\n".join(f"  - {where}: {message}" for where, message in formatted)
    return TemplateError(f"{summary}:\n{lines}", problems=formatted)

"""A stand-in logger for code that takes a ``log``: it keeps every line it is given."""

from __future__ import annotations


class LineLog:
    """Keeps each message, formatted, in :attr:`lines`, whatever its level."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, message: str, *args: object) -> None:
        self.lines.append(message % args)

    def log(self, level: int, message: str, *args: object) -> None:
        self.lines.append(message % args)

    debug = warning = exception = info

    def of(self, pod: str) -> list[str]:
        """The lines logged for ``pod`` (``[<pod>] <line>``), without that prefix."""
        prefix = f"[{pod}] "
        return [line[len(prefix) :] for line in self.lines if line.startswith(prefix)]

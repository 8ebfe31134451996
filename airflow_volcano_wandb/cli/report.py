"""The doctor's report: one :class:`Result` per check, and what they make of the exit code."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclass(frozen=True)
class Result:
    """One line of the report."""

    name: str
    status: str
    detail: str
    hint: str = ""

    def line(self) -> str:
        text = f"{self.status:4}  {self.name}: {self.detail}"
        return f"{text}\n      fix: {self.hint}" if self.hint and self.status != OK else text


def exit_code(results: Iterable[Result]) -> int:
    return 1 if any(r.status == FAIL for r in results) else 0

"""A followed pod log, as whole lines for a task log: joined, capped, and not shown twice.

Pure: bytes in, text out; the full log stays in the pod.
"""

from __future__ import annotations

import codecs
import re
from dataclasses import dataclass, field

#: Defaults of the per-job cap: a training log that chatty belongs in W&B, not in Airflow.
DEFAULT_MAX_LINES = 10_000
DEFAULT_MAX_BYTES = 1024 * 1024


class LineJoiner:
    """Turns byte chunks into complete lines, each exactly once, a line or a multi-byte
    character split across chunks included; bytes that are not UTF-8 are replaced."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._partial = ""

    def feed(self, chunk: bytes) -> list[str]:
        """The lines this chunk completes."""
        text = self._partial + self._decoder.decode(chunk)
        *lines, self._partial = text.split("\n")
        return [line.removesuffix("\r") for line in lines]

    def flush(self) -> list[str]:
        """The stream ended: its last line, even without a newline."""
        rest = (self._partial + self._decoder.decode(b"", final=True)).removesuffix("\r")
        self._partial = ""
        return [rest] if rest else []


@dataclass
class LogCap:
    """At most ``max_lines`` lines and ``max_bytes`` bytes of one job's log; the first refusal
    also yields, once, the notice to show in its place."""

    max_lines: int = DEFAULT_MAX_LINES
    max_bytes: int = DEFAULT_MAX_BYTES
    lines: int = 0
    bytes: int = 0
    reached: bool = False

    def admit(self, line: str) -> tuple[bool, str | None]:
        """(show the line?, a notice to show once the cap is reached)."""
        if self.reached:
            return False, None
        size = len(line.encode())
        if self.lines + 1 > self.max_lines or self.bytes + size > self.max_bytes:
            self.reached = True
            return False, (
                f"... master log capped at {self.lines} lines ({self.bytes} bytes); "
                "the full log is in the pod"
            )
        self.lines += 1
        self.bytes += size
        return True, None


# The kubelet's ``timestamps=true`` prefix: RFC 3339 with up to nine fractional digits.
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


def split_timestamp(line: str) -> tuple[tuple[str, int] | None, str]:
    """``(sortable stamp, text)`` of a line read with ``timestamps=true``; the stamp compares
    in time order whatever its fractional digits; ``None`` for a line without one."""
    match = _STAMP.match(line)
    if match is None:
        return None, line
    seconds, fraction, zone = match.groups()
    nanos = int((fraction or "").ljust(9, "0"))
    return (f"{seconds}{zone}", nanos), line[match.end() :]


@dataclass
class SeenLines:
    """What a container's earlier follow streams showed: a reopened stream replays the log,
    so lines older than the last shown, and as many stamped like it as were shown, are skipped."""

    last: tuple[str, int] | None = None
    shown_at_last: int = 0
    _skip_at_last: int = field(default=0, repr=False)

    def reopened(self) -> None:
        self._skip_at_last = self.shown_at_last

    def is_new(self, stamp: tuple[str, int] | None) -> bool:
        """Whether a line with this stamp was not shown yet (and now counts as shown)."""
        if stamp is None:  # no stamp to go by: show it rather than lose it
            return True
        if self.last is None or stamp > self.last:
            self.last, self.shown_at_last, self._skip_at_last = stamp, 1, 0
            return True
        if stamp < self.last:
            return False
        if self._skip_at_last:
            self._skip_at_last -= 1
            return False
        self.shown_at_last += 1
        return True

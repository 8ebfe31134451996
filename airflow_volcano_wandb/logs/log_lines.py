"""A followed pod log, as whole lines for a task log: joined, capped, and not shown twice.

Pure: bytes in, text out; the full log stays in the pod.
"""

from __future__ import annotations

import codecs
import datetime as dt
import re
from dataclasses import dataclass, field

#: Defaults of the per-job cap: a training log that chatty belongs in W&B, not in Airflow.
DEFAULT_MAX_LINES = 10_000
DEFAULT_MAX_BYTES = 1024 * 1024


class LineJoiner:
    """Turns byte chunks into complete lines, each exactly once.

    A line split across chunks comes out whole when its end arrives; so does a multi-byte
    character split across chunks. Bytes that are not UTF-8 are replaced, never fatal. A
    ``\\r\\n`` ending counts as ``\\n``.
    """

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
    """At most ``max_lines`` lines and ``max_bytes`` bytes (UTF-8) of one job's log.

    ``admit`` says whether a line may still be shown; the first refusal also yields, once,
    the notice to show in its place.
    """

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
    """``(sortable stamp, text)`` of a line read with ``timestamps=true``.

    The stamp compares in time order whatever the number of fractional digits (``.5`` is
    later than ``.49``); a line without a stamp gives ``None`` and the line unchanged.
    Kubelets write UTC (``Z``); an offset is kept as text and only compared as such.
    """
    match = _STAMP.match(line)
    if match is None:
        return None, line
    seconds, fraction, zone = match.groups()
    nanos = int((fraction or "").ljust(9, "0"))
    return (f"{seconds}{zone}", nanos), line[match.end() :]


def stamp_seconds(stamp: tuple[str, int]) -> float:
    """A stamp of :func:`split_timestamp` as seconds since the epoch (a ``time.time()``)."""
    moment = dt.datetime.fromisoformat(stamp[0].replace("Z", "+00:00"))
    return moment.timestamp() + stamp[1] / 1e9


@dataclass
class SeenLines:
    """What a container's earlier follow streams showed, by timestamp.

    Call ``reopened()`` when a new stream of the same pod starts (it replays the log from the
    start): lines older than the last one shown are skipped, and so are as many lines
    stamped exactly like it as were shown before (two lines may share a stamp).
    """

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

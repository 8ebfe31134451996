"""Numbers read from W&B's loosely typed JSON (pure).

A run's summary holds whatever the trainer logged, and a sweep configuration whatever its
author wrote: a value that should be a number may be a bool (an ``int`` to Python), a string,
``NaN`` or infinity, a nested dict or missing. Every reader of such a number asks
:func:`finite_number`, so all of them pass over the same values.
"""

from __future__ import annotations

import math
from typing import Any, TypeVar

N = TypeVar("N", int, float)


def finite_number(value: Any, kind: type[N]) -> N | None:
    """``value`` as ``kind`` (``int`` drops a fraction) when it is a finite number; ``None``
    for anything else: a bool, a string, ``NaN`` or infinity, a container, ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return kind(value)

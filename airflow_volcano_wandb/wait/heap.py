"""Give the C heap's free pages back to the operating system after a watch's LIST.

A watch's (re)LIST parses every object of the namespace (megabytes per page at 1,000 running
jobs) and keeps a slim copy of each. glibc's ``malloc`` keeps the freed pages for reuse, and the
kept copies, allocated in between, pin them: the RSS would stay at the LIST's peak for good.
``malloc_trim(0)`` hands the wholly free pages back; elsewhere than glibc nothing is done.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):  # no C library to load, or not glibc's
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Return the C heap's free pages to the OS; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True

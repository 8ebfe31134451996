"""Give the C heap's free pages back to the operating system after a watch's LIST.

A watch's (re)LIST parses every object of the namespace (3,000 pods at 1,000 running jobs,
several megabytes per page of JSON) and keeps a slim copy of each; the pages themselves are
freed at once. glibc's ``malloc`` keeps what is freed inside its heap for reuse, and the kept
copies, allocated in between, pin that heap: the process's RSS stays at the LIST's peak for
good. ``malloc_trim(0)`` hands the heap's wholly free pages back (``madvise``), which keeps the
triggerer's resident memory near what it actually holds. Elsewhere than glibc (musl, macOS)
there is no such call and nothing is done.
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

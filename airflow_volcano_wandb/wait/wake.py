"""Waits with a time limit that never lose their caller's cancellation: before Python 3.12,
``asyncio.wait_for`` swallows one that comes as the awaited thing completes (cpython#86296),
and a trigger cancelled by its triggerer just as its job changed went on waiting."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def within(awaitable: Awaitable[T], seconds: float) -> T:
    """``awaitable``'s result; :class:`TimeoutError` (and it cancelled) after ``seconds``."""
    task = asyncio.ensure_future(awaitable)
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except BaseException:  # the caller's cancellation: it goes on up
        task.cancel()
        raise
    if not done:
        task.cancel()
        # Ended before the caller reads again: a stream takes one reader at a time.
        await asyncio.wait({task})
        raise TimeoutError(f"no answer within {seconds:g} s")
    return task.result()


async def set_within(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` is set, waiting for it at most ``seconds``."""
    if event.is_set():
        return True
    try:
        return await within(event.wait(), seconds)
    except TimeoutError:
        return False

"""A call over an API client that others share, and whose owner may close it under the call.

A namespace's watch lends its open client to every waiter's reads (no TLS handshake per
read), and closes it to reconnect. aiohttp then cancels the future of each request still
queued for one of the client's pooled connections: the ``CancelledError`` reaches the caller
as if its own task had been cancelled. A trigger whose ``run`` raises it is dropped by the
triggerer without an event (as a trigger the triggerer cancelled), and its task waits on. So a
cancel that nobody asked of the caller's task is raised here as :class:`SharedClientClosed`,
a connection error like any other the caller already tolerates.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import aiohttp

T = TypeVar("T")


class SharedClientClosed(aiohttp.ClientConnectionError):
    """A call over a shared client was cut off by that client's closing (a reconnect)."""


async def over_shared_client(call: Awaitable[T], what: str) -> T:
    """``await call``, made over a client shared with others (``what``, in words, for the
    error); its owner closing the client under the call raises :class:`SharedClientClosed`."""
    try:
        return await call
    except asyncio.CancelledError:
        if cancel_requested():
            raise
        raise SharedClientClosed(f"{what} closed under the call") from None


def cancel_requested() -> bool:
    """Whether someone asked to cancel the current task (``Task.cancelling``, Python 3.11).

    Without it (3.10) every ``CancelledError`` is taken as asked for: a real cancellation
    (a user's kill, the triggerer stopping) must never be swallowed."""
    task = asyncio.current_task()
    cancelling = getattr(task, "cancelling", None)
    return cancelling is None or cancelling() > 0

"""An API client its owner lends to other callers, closed only once nobody is calling over it.

A namespace's watch lends its open client to every waiter's reads (no TLS handshake per
read) and lets it go when it reconnects. Closing an aiohttp client under calls is not safe
(aiohttp 3.14, with the ``trust_env`` session kubernetes_asyncio makes): requests queued for
its pool are cancelled, and that ``CancelledError`` ends a trigger's ``run`` as if the
triggerer had cancelled it, so the triggerer drops it without an event; requests between
their executor hops (netrc and proxy lookups) fail with an ``AssertionError`` or "Connector
is closed", each leaking one of the pool's slots; once the slots are gone, every later
request waits for a connection from a connector nobody will close again, for ever (the
outage trial: 203 of 1,000 verdicts never came). So a lent client is closed only after its
owner has let it go and the last call over it has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

# Closes begun by a call's return, held until done (the loop keeps only weak references).
_closing: set[asyncio.Task] = set()


class LentClient:
    """An open API client (``api``, made by ``hook.get_conn()``) that its owner lends out."""

    def __init__(self, hook: Any, api: Any, stack: contextlib.AsyncExitStack) -> None:
        self.hook = hook
        self.api = api
        self._stack = stack
        self._calls = 0
        self._let_go = False

    @classmethod
    async def open(cls, hook: Any) -> LentClient:
        """A new client of ``hook``'s (its ``get_conn()``, kept open until closed here)."""
        stack = contextlib.AsyncExitStack()
        api = await stack.enter_async_context(hook.get_conn())
        return cls(hook, api, stack)

    async def call(self, call: Callable[[Any, Any], Awaitable[T]]) -> T:
        """``call(hook, api)`` over this client; it stays open until the call returns."""
        self._calls += 1
        try:
            return await call(self.hook, self.api)
        finally:
            self._calls -= 1
            if self._let_go and not self._calls:
                # Not awaited here: the caller's answer (or its cancellation) must not wait
                # on a TLS shutdown.
                task = asyncio.get_running_loop().create_task(self._stack.aclose())
                _closing.add(task)
                task.add_done_callback(_closing.discard)

    async def let_go(self) -> None:
        """The owner is done with the client: close it now if nobody is calling over it,
        else when the last call returns. Lend it no more after this."""
        self._let_go = True
        if not self._calls:
            await self._stack.aclose()

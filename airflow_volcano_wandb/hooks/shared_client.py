"""An API client its owner lends to other callers, closed only once nobody is calling over it.

A namespace's watch lends its open client to every waiter's reads (no TLS handshake per read);
the master-log follows of a namespace share one (``logs.log_client``). Closing an aiohttp
client under calls is not safe (aiohttp 3.14, kubernetes_asyncio's ``trust_env`` session):
requests queued for its pool are cancelled, and that ``CancelledError`` ends a trigger's
``run`` as if the triggerer had cancelled it (dropped without an event); requests between
their executor hops fail and each leaks a pool slot, until every later request waits for ever
(the outage trial: 203 of 1,000 verdicts never came). So a lent client is closed only after
its owner has let it go and the last call over it has returned.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
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
        self._users = 0
        self.held = True  # until the owner lets it go

    @classmethod
    async def open(cls, hook: Any) -> LentClient:
        """A new client of ``hook``'s (its ``get_conn()``, kept open until closed here)."""
        stack = contextlib.AsyncExitStack()
        api = await stack.enter_async_context(hook.get_conn())
        return cls(hook, api, stack)

    @contextlib.asynccontextmanager
    async def lent(self) -> AsyncIterator[LentClient]:
        """One use of the client (a call, a log stream); it stays open until every use ends."""
        self._users += 1
        try:
            yield self
        finally:
            self._users -= 1
            if not self.held and not self._users:
                # Not awaited here: the user's answer (or its cancellation) must not wait on a
                # TLS shutdown.
                task = asyncio.get_running_loop().create_task(self._stack.aclose())
                _closing.add(task)
                task.add_done_callback(_closing.discard)

    async def call(self, call: Callable[[Any, Any], Awaitable[T]]) -> T:
        """``call(hook, api)`` over this client, as one use of it."""
        async with self.lent():
            return await call(self.hook, self.api)

    @property
    def in_use(self) -> bool:
        return self._users > 0

    async def let_go(self) -> None:
        """The owner is done with the client: close it now if nobody uses it, else when the
        last use ends. Lend it no more after this."""
        self.held = False
        if not self._users:
            await self._stack.aclose()

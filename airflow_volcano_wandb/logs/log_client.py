"""One Kubernetes API client per event loop, connection and namespace, for the log follows.

Each followed master needs a stream of its own (an HTTP/1.1 response is one connection), but
not a client of its own: a client holds its own TLS context and connection pool (about half a
megabyte). So the follows of a triggerer share one client per (event loop, connection,
namespace), opened by the first follow and closed by the last. A follow whose stream failed
calls :meth:`LogClient.retire`: the next follow to start opens a new client, with credentials
loaded afresh (a rotated token, a replaced kubeconfig), and the old one closes when the last
follow still on it leaves. A client pools at most ``connection_pool_maxsize`` (100)
connections: more follows at once than that wait for one (``max_concurrent_log_follows``
keeps them at 50 by default).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook


class LogClient:
    """A hook and its open client, with the follows using it counted."""

    def __init__(self, hook: AsyncVolcanoHook, api: Any, stack: contextlib.AsyncExitStack):
        self.hook, self.api = hook, api
        self._stack = stack
        self.users = 0
        self.retired = False

    def retire(self) -> None:
        """Open no new follow on this client (it failed once: its credentials may be stale)."""
        self.retired = True

    async def close(self) -> None:
        await self._stack.aclose()


_clients: dict[tuple[int, Hashable, str], LogClient] = {}
_opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def log_client(
    key: Hashable, namespace: str, hook_factory: Callable[[], AsyncVolcanoHook]
) -> AsyncIterator[LogClient]:
    """The event loop's log client for this connection and namespace, for one follow."""
    loop = asyncio.get_running_loop()
    loop_key = (id(loop), key, namespace)
    opening = _opening.get(loop)
    if opening is None:
        opening = _opening[loop] = asyncio.Lock()
    async with opening:
        client = _clients.get(loop_key)
        if client is None or client.retired:
            stack = contextlib.AsyncExitStack()
            hook = hook_factory()
            api = await stack.enter_async_context(hook.get_conn())
            client = _clients[loop_key] = LogClient(hook, api, stack)
        client.users += 1
    try:
        yield client
    finally:
        client.users -= 1
        if client.users == 0:  # the last follow on it: closed, whether current or retired
            if _clients.get(loop_key) is client:
                del _clients[loop_key]
            await client.close()


def open_log_clients() -> int:
    """How many log clients this process holds open (for benchmarks and tests)."""
    return len(_clients)

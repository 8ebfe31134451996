"""One Kubernetes API client per event loop, connection and namespace, for the log follows.

Each followed master needs a stream of its own, but not a client of its own (a TLS context and
a pool, about half a megabyte): the follows of a triggerer share one client per (event loop,
connection, namespace), opened by the first follow and closed by the last. A follow whose
stream failed lets its client go (``shared_client.LentClient``), so the next one opens a new
client with credentials loaded afresh. A client pools at most ``connection_pool_maxsize``
(100) connections; ``max_concurrent_log_follows`` keeps follows at 50 by default.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from typing import TYPE_CHECKING

from airflow_volcano_wandb.hooks.shared_client import LentClient

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

_clients: dict[tuple[int, Hashable, str], LentClient] = {}
_opening: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
    weakref.WeakKeyDictionary()
)


@contextlib.asynccontextmanager
async def log_client(
    key: Hashable, namespace: str, hook_factory: Callable[[], AsyncVolcanoHook]
) -> AsyncIterator[LentClient]:
    """The event loop's log client for this connection and namespace, for one follow."""
    loop = asyncio.get_running_loop()
    loop_key = (id(loop), key, namespace)
    async with _opening.setdefault(loop, asyncio.Lock()):
        client = _clients.get(loop_key)
        if client is None or not client.held:
            client = _clients[loop_key] = await LentClient.open(hook_factory())
    try:
        async with client.lent():
            yield client
    finally:
        # The last follow on the current client closes it; one let go closes on its own.
        if not client.in_use and _clients.get(loop_key) is client:
            del _clients[loop_key]
            await client.let_go()


def open_log_clients() -> int:
    """How many log clients this process holds open (for benchmarks and tests)."""
    return len(_clients)

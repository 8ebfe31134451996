"""A call queued on a watch's shared client when the watch closes that client (to reconnect).

aiohttp cancels the future of every request still waiting for one of a closing connector's
pooled connections. Raised as it is, that ``CancelledError`` ends a trigger's ``run`` as if the
trigger were cancelled, and the triggerer drops it without an event (the outage trial's
missing verdicts). Here a real aiohttp client with a pool of one talks to a real local server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from airflow_volcano_wandb.hooks.shared_client import SharedClientClosed
from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher


@contextlib.asynccontextmanager
async def held_server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """A local HTTP server whose answers wait until the event is set."""
    release = asyncio.Event()

    async def answer(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/", release
    finally:
        release.set()
        await runner.cleanup()


def watch_over(session: aiohttp.ClientSession) -> NamespaceJobWatcher:
    watch = NamespaceJobWatcher(lambda: None, "ns")  # type: ignore[arg-type, return-value]
    watch._client = (None, session)  # as the watch holds its open client while connected
    return watch


async def get(url: str, session: Any) -> str:
    async with session.get(url) as response:
        return await response.text()


def test_a_call_queued_on_the_closing_client_fails_as_a_connection_error() -> None:
    async def scenario() -> tuple[BaseException | str, BaseException | str]:
        async with held_server() as (url, _):
            session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1))
            watch = watch_over(session)
            holding = asyncio.create_task(watch.over_client(lambda hook, api: get(url, api)))
            queued = asyncio.create_task(watch.over_client(lambda hook, api: get(url, api)))
            await asyncio.sleep(0.3)  # one holds the pool's only connection, one waits for it
            await session.close()  # what the watch does when it reconnects
            done = await asyncio.gather(holding, queued, return_exceptions=True)
            return done[0], done[1]

    holding, queued = asyncio.run(scenario())
    assert isinstance(queued, SharedClientClosed), queued
    assert isinstance(queued, aiohttp.ClientConnectionError)  # transient: read again later
    assert "watch of Volcano jobs" in str(queued)
    assert "closed under the call" in str(queued)
    assert isinstance(holding, aiohttp.ClientError), holding  # the call on the wire, cut off


def test_the_callers_own_cancellation_is_still_a_cancellation() -> None:
    async def scenario() -> asyncio.Task:
        pool_of_one = aiohttp.TCPConnector(limit=1)
        async with held_server() as (url, _), aiohttp.ClientSession(connector=pool_of_one) as api:
            watch = watch_over(api)
            holding = asyncio.create_task(watch.over_client(lambda hook, api: get(url, api)))
            queued = asyncio.create_task(watch.over_client(lambda hook, api: get(url, api)))
            await asyncio.sleep(0.3)
            queued.cancel()  # the triggerer cancelling the trigger: a user's kill
            holding.cancel()
            await asyncio.gather(holding, queued, return_exceptions=True)
            return queued

    queued = asyncio.run(scenario())
    assert queued.cancelled()
    with pytest.raises(asyncio.CancelledError):
        queued.result()

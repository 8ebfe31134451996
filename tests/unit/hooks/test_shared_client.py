"""A lent client is never closed under a call: a watch reconnecting while waiters read over
its client.

Closing an aiohttp client under calls cancels those queued for its pool, fails those between
their executor hops, and leaks a pool slot for each of those, after which later calls wait for
ever (the outage trial's missing verdicts). Here real aiohttp clients (a pool of ten, the
``trust_env`` session kubernetes_asyncio makes) talk to a real local server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from airflow_volcano_wandb.hooks.shared_client import LentClient
from test_support.local_server import served

CALLS = 3000  # enough that many are still in their executor hops when the owner lets go


@contextlib.asynccontextmanager
async def slow_server(answer_after: float = 0.02) -> AsyncIterator[str]:
    async def answer(request: web.Request) -> web.Response:
        await asyncio.sleep(answer_after)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", answer)
    async with served(app) as base_url:
        yield f"{base_url}/"


class SessionHook:
    """What a lent client needs of a hook: ``get_conn()``, here an aiohttp session."""

    def __init__(self) -> None:
        self.sessions: list[aiohttp.ClientSession] = []

    @contextlib.asynccontextmanager
    async def get_conn(self) -> AsyncIterator[aiohttp.ClientSession]:
        session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=10), trust_env=True)
        self.sessions.append(session)
        async with session:
            yield session


async def get(url: str, session: aiohttp.ClientSession) -> str:
    async with session.get(url) as response:
        return await response.text()


def test_calls_in_flight_when_the_owner_lets_go_all_answer_then_the_client_closes() -> None:
    async def scenario() -> tuple[list[BaseException | str], list[bool], list[bool]]:
        async with slow_server() as url:
            hook = SessionHook()
            client = await LentClient.open(hook)
            calls = [
                asyncio.create_task(client.call(lambda hook, api: get(url, api)))
                for _ in range(CALLS)
            ]
            await asyncio.sleep(0.6)  # some answered, some queued, some between their hops
            await client.let_go()  # what the watch does when it reconnects
            open_after_let_go = [session.closed for session in hook.sessions]
            done, pending = await asyncio.wait(calls, timeout=120)
            assert not pending, f"{len(pending)} calls never answered"
            await asyncio.sleep(0.1)  # the close the last call began
            answers = [call.exception() or call.result() for call in done]
            return answers, open_after_let_go, [session.closed for session in hook.sessions]

    answers, closed_at_let_go, closed_at_end = asyncio.run(scenario())
    assert answers.count("ok") == CALLS, {str(a) for a in answers if a != "ok"}
    assert closed_at_let_go == [False]  # calls were still over it
    assert closed_at_end == [True]


def test_an_idle_client_closes_when_let_go() -> None:
    async def scenario() -> bool:
        hook = SessionHook()
        client = await LentClient.open(hook)
        await client.let_go()
        return hook.sessions[0].closed

    assert asyncio.run(scenario())


def test_a_callers_own_cancellation_is_a_cancellation_and_the_client_still_closes() -> None:
    async def scenario() -> tuple[asyncio.Task, bool]:
        async with slow_server(answer_after=1) as url:
            hook = SessionHook()
            client = await LentClient.open(hook)
            call = asyncio.create_task(client.call(lambda hook, api: get(url, api)))
            await asyncio.sleep(0.05)
            await client.let_go()
            call.cancel()  # the triggerer cancelling the trigger: a user's kill
            await asyncio.gather(call, return_exceptions=True)
            await asyncio.sleep(0.1)
            return call, hook.sessions[0].closed

    call, closed = asyncio.run(scenario())
    assert call.cancelled()
    with pytest.raises(asyncio.CancelledError):
        call.result()
    assert closed

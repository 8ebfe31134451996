"""log_client: the follows of one event loop, connection and namespace share one client."""

from __future__ import annotations

import asyncio
import contextlib

from airflow_volcano_wandb.logs import log_client as log_clients
from airflow_volcano_wandb.logs.log_client import log_client


class Hook:
    made: list[Hook] = []

    def __init__(self) -> None:
        self.open = False
        Hook.made.append(self)

    @contextlib.asynccontextmanager
    async def get_conn(self):
        self.open = True
        try:
            yield f"client of hook {len(Hook.made)}"
        finally:
            self.open = False


def test_follows_share_a_client_that_the_last_one_out_closes():
    Hook.made = []

    async def main():
        async with log_client("conn", "ns", Hook) as one, log_client("conn", "ns", Hook) as two:
            assert one is two and len(Hook.made) == 1
            async with log_client("conn", "other-ns", Hook) as three:
                assert three is not one
            assert not Hook.made[1].open  # its last follow left
            assert Hook.made[0].open
            assert log_clients.open_log_clients() == 1
        assert not Hook.made[0].open
        assert log_clients.open_log_clients() == 0

    asyncio.run(main())


def test_a_client_let_go_serves_no_new_follow_and_closes_when_its_last_follow_leaves():
    Hook.made = []

    async def main():
        async with log_client("conn", "ns", Hook) as failed:
            await failed.let_go()  # its stream failed: its credentials may be stale
            async with log_client("conn", "ns", Hook) as fresh:
                assert fresh is not failed and len(Hook.made) == 2
            assert not Hook.made[1].open
            assert Hook.made[0].open  # still used by the follow that let it go
        await asyncio.sleep(0)  # the close its last follow began
        assert not Hook.made[0].open
        assert log_clients.open_log_clients() == 0

    asyncio.run(main())

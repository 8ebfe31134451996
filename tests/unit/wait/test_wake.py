"""``wait/wake.py``: time-limited waits that never lose their caller's cancellation."""

from __future__ import annotations

import asyncio

import pytest

from airflow_volcano_wandb.wait.wake import set_within, within


def test_an_event_set_in_time_is_seen_and_one_never_set_times_out():
    async def main() -> tuple[bool, bool, bool]:
        event = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, event.set)
        return (
            await set_within(event, 5),
            await set_within(event, 0),
            await set_within(asyncio.Event(), 0.05),
        )

    assert asyncio.run(main()) == (True, True, False)


def test_a_read_returns_its_answer_and_one_too_slow_is_cancelled_with_a_timeout():
    async def main() -> None:
        assert await within(asyncio.sleep(0, result="chunk"), 5) == "chunk"
        slow = asyncio.ensure_future(asyncio.sleep(60))
        with pytest.raises(TimeoutError):
            await within(slow, 0.05)
        await asyncio.sleep(0)
        assert slow.cancelled()

    asyncio.run(main())


@pytest.mark.parametrize("wait", ["set_within", "within"])
def test_a_cancellation_that_comes_as_the_event_is_set_still_ends_the_waiter(wait):
    """Python 3.11's ``asyncio.wait_for`` returns normally here, and the waiter goes on."""

    async def main() -> None:
        event = asyncio.Event()
        if wait == "set_within":
            waiter = asyncio.create_task(set_within(event, 10))
        else:
            waiter = asyncio.create_task(within(event.wait(), 10))
        await asyncio.sleep(0)  # the waiter waits
        event.set()
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    asyncio.run(main())

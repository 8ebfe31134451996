"""A trigger whose shared job watch keeps failing reads its job directly, once per
``poll_interval``, and ends as a lost watch only when no read was answered for
``watch_failure_grace``. On the cluster: ``tests/reliability/test_late_verdicts.py`` (a watch
cut every few seconds) and ``bench/scenario_outage.py`` (a 5-minute apiserver outage); here,
the rule that decides, with a stand-in for the failing watch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from types import SimpleNamespace

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.triggers import VolcanoJobTrigger

GRACE = 0.3


class FailingWatch:
    """A job watch that has failed for a minute; its direct reads answer while ``answering``
    says so, and are refused otherwise."""

    def __init__(self, answering: Callable[[int], bool]) -> None:
        self.synced = asyncio.Event()  # never set: the watch stays down
        self.failing_since = time.monotonic() - 60.0
        self.last_failure = "Could not reach the Kubernetes API"
        self.answering = answering
        self.reads = 0

    def job(self, name: str) -> dict | None:
        return None

    async def fetch(self, name: str) -> dict:
        self.reads += 1
        if not self.answering(self.reads):
            raise ConnectionRefusedError("refused")
        return {
            "metadata": {"name": name, "namespace": "ns", "resourceVersion": str(self.reads)},
            "status": {"state": {"phase": "Running"}},
        }


async def _wait(watch: FailingWatch, seconds: float):
    trigger = VolcanoJobTrigger(
        job_name="j", namespace="ns", poll_interval=0.02, watch_failure_grace=GRACE
    )
    subscription = SimpleNamespace(changed=asyncio.Event())
    return await asyncio.wait_for(trigger._wait(watch, subscription, None, None), seconds)


def test_a_read_lost_between_answered_ones_does_not_end_the_wait():
    # Every other read refused (a proxy that cuts connections), past the grace all along.
    watch = FailingWatch(lambda read: read % 2 == 1)

    async def main() -> bool:
        try:
            await _wait(watch, 1.0)
        except TimeoutError:
            return True  # still waiting
        return False

    assert asyncio.run(main()), "the wait ended on one refused read"
    assert watch.reads >= 10  # it kept reading, one read per poll_interval


def test_reads_refused_for_the_grace_end_the_wait_as_a_lost_watch():
    answered_until = time.monotonic() + 0.3
    watch = FailingWatch(lambda read: time.monotonic() < answered_until)
    result = asyncio.run(_wait(watch, 5.0))
    assert result.outcome is Ending.WATCH_LOST
    assert time.monotonic() - answered_until >= GRACE - 0.05  # counted from the last answer
    assert "Could not reach the Kubernetes API" in result.message

"""What a wait keeps of a trainer's ``AVW_PROGRESS`` records' metrics for after its job's
end: the master-log follow samples them (``training_progress.keep_metrics``) and the
trigger fires with them (``WaitResult.metrics``). On the cluster:
``tests/integration/test_master_log_on_cluster.py::test_a_followed_records_metrics_fire_with_the_triggers_event``.
"""

from __future__ import annotations

import asyncio

import pytest

from airflow_volcano_wandb.logs import master_log
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wait.outcome import WaitResult
from test_support.line_log import LineLog
from tests.unit.logs.test_master_log import _follow, _Hook, _pod, _Stream


@pytest.mark.parametrize("read", [True, False])
def test_the_follow_keeps_the_records_metrics_at_their_steps(monkeypatch, read):
    """Only when it reads the records (not when the wait reads W&B's progress)."""
    monkeypatch.setattr(master_log, "RECHECK_SECONDS", 0.05)
    records = "".join(
        f'2026-01-01T00:00:{10 * i}Z AVW_PROGRESS {{"step": {100 * i}, "total_steps": 400, '
        f'"train/epoch_loss": {1 / i}, "eval/loss": "n/a"}}\n'
        for i in (1, 2, 3)
    )
    hook = _Hook([_pod()], [_Stream([records.encode()], True)])
    kept: dict[str, list[list[float]]] = {}
    _follow(hook, LineLog(), progress=read, kept=kept)
    assert kept == ({"train/epoch_loss": [[100, 1.0], [200, 0.5], [300, 0.333333]]} if read else {})


def test_the_triggers_event_carries_the_metrics_its_follow_kept(monkeypatch):
    """What the follow kept of the records' metrics, when the wait ends, fires with the
    result (``WaitResult.metrics``), for the finished wait to push as its XCom."""

    async def fake_follow(*args, kept, **kwargs):
        kept["train/epoch_loss"] = [[100, 1.25], [200, 0.5]]
        await asyncio.Event().wait()

    async def ended(job_watcher, pods):
        await asyncio.sleep(0.05)  # the follow has read its records meanwhile
        return WaitResult.watch_lost("j", "ns", "u-1", "gone")

    monkeypatch.setattr(master_log, "follow_master_log", fake_follow)
    trigger = VolcanoJobTrigger(job_name="j", namespace="ns", follow_master_log=True)
    monkeypatch.setattr(trigger, "_watch", ended)

    async def fire() -> dict:
        async for event in trigger.run():
            return event.payload
        raise AssertionError("the trigger fired no event")

    event = asyncio.run(fire())
    assert WaitResult.from_event(event).metrics == {"train/epoch_loss": [[100, 1.25], [200, 0.5]]}

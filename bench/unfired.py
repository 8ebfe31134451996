"""What became of a ``trigger_driver.py`` run's triggers that sent no event: the ones that
ended with an error, and where the others wait (so a trial whose verdicts went missing says
why)."""

from __future__ import annotations

import gc
from collections import Counter
from pathlib import Path
from types import AsyncGeneratorType
from typing import Any


def awaiting(limit: int = 8) -> dict[str, int]:
    """Where the provider's triggers that have not fired are suspended, counted: each one's
    ``run`` generator followed down its chain of awaits to the innermost coroutine (file, line
    and name of each frame)."""
    stacks: Counter = Counter()
    for obj in gc.get_objects():
        # Only async generators: a getattr on any other object may run code (six's lazy
        # modules import on attribute access, and failed the first run that tried).
        if not isinstance(obj, AsyncGeneratorType) or obj.ag_frame is None:
            continue
        if "triggers/volcano" not in obj.ag_frame.f_code.co_filename:
            continue
        where, link = [], obj
        while link is not None:
            frame = getattr(link, "ag_frame", None) or getattr(link, "cr_frame", None)
            if frame is not None:
                name = Path(frame.f_code.co_filename).name
                where.append(f"{name}:{frame.f_lineno} {frame.f_code.co_name}")
            link = getattr(link, "ag_await", None) or getattr(link, "cr_await", None)
        stacks[" > ".join(where)] += 1
    return dict(stacks.most_common(limit))


def keep_cancelled(runner: Any) -> list[int]:
    """Make the runner's cleanup note the triggers whose task ended cancelled, which it drops
    without a word (a trigger's ``run`` that raised ``CancelledError`` looks the same as a
    trigger the triggerer cancelled); return the list it fills with their ids."""
    cancelled: list[int] = []
    cleanup = runner.cleanup_finished_triggers

    async def noting_cleanup() -> list[int]:
        for trigger_id, details in runner.triggers.items():
            if details["task"].done() and details["task"].cancelled():
                cancelled.append(trigger_id)
        return await cleanup()

    runner.cleanup_finished_triggers = noting_cleanup
    return cancelled


def unfired_triggers(runner: Any, names: list[str], cancelled: list[int]) -> dict[str, Any]:
    """``failed_triggers``: those that ended without an event (their job, their error);
    ``cancelled_triggers``: those whose ``run`` ended cancelled, though nothing cancelled them
    (``keep_cancelled``); ``awaiting``: where the unfired ones wait (empty when every trigger
    fired)."""
    return {
        "failed_triggers": [
            {"job": names[tid - 1], "error": repr(exc)[:500]} for tid, exc in runner.failed_triggers
        ],
        "cancelled_triggers": [names[tid - 1] for tid in cancelled],
        "awaiting": awaiting() if len(runner.events.stamps) < len(names) else {},
    }

"""W&B runs on the stand-in that train as the progress contract says (docs/trainer.md).

Each run logs its step and total steps, its epoch of 3 and an ``eval/accuracy`` every second,
reaching its last step ``reports_for`` seconds after it starts, then its final summary, as a
trainer's ``run.finish()`` syncs it before the process ends. A waiting task reads them into
its progress lines; what is simulated is the trainer (and the W&B server).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from test_support.wandb_standin import WandbStandin


def report_training(
    standin: WandbStandin,
    where: tuple[str, str, str],
    *,
    reports_for: float,
    total_steps: int,
    final_summary: Mapping[str, Any],
    done: threading.Event,
    starts: Callable[[], bool] | None = None,
) -> None:
    """Log the steps of run ``where`` (entity, project, run id) until its last or ``done``;
    from when ``starts()`` first says so (polled every second), if given."""
    while starts is not None and not starts():
        if done.wait(1.0):
            return
    started, step = time.monotonic(), 0
    while not done.wait(1.0) and step < total_steps:
        elapsed = time.monotonic() - started
        step = min(total_steps, int(total_steps * elapsed / reports_for))
        logged = {
            "train/step": step,
            "train/total_steps": total_steps,
            "epoch": 1 + 3 * step // (total_steps + 1),
            "train/epochs": 3,
            "eval/accuracy": round(0.5 + 0.4375 * step / total_steps, 4),
            "_runtime": elapsed,
        }
        standin.log_step(*where, step, **logged)
    standin.log_step(*where, step, **final_summary)


@contextlib.contextmanager
def reporting(
    standin: WandbStandin,
    runs: Iterable[tuple[str, str, str]],
    *,
    starts: Callable[[str], bool] | None = None,
    **how: Any,
) -> Iterator[None]:
    """Each of ``runs`` (entity, project, run id) trains in a thread of its own while the
    block lasts (:func:`report_training`'s ``how``); ``starts(run_id)``: when each begins."""
    done = threading.Event()
    threads = [
        threading.Thread(
            target=report_training,
            args=(standin, where),
            kwargs={
                **how,
                "done": done,
                "starts": None if starts is None else (lambda run_id=where[2]: starts(run_id)),
            },
            daemon=True,
        )
        for where in runs
    ]
    for thread in threads:
        thread.start()
    try:
        yield
    finally:
        done.set()
        for thread in threads:
            thread.join()

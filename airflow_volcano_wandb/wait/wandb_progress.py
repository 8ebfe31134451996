"""What a wait asks of the job's online W&B run: its last step (``stall``), its progress
(``training_progress``), whether it was stopped (``wandb_stop``). Each read runs in a thread,
off the triggerer's event loop, under a deadline, through the process's one client per
connection (``WandbHook.shared``). Whatever keeps W&B from answering (no key, an error, a run
not created yet) leaves the verdict to the job and its log, said once per waiter and question.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from airflow_volcano_wandb.wait.judge import WandbRunRef
from airflow_volcano_wandb.wait.stall import WandbStep
from airflow_volcano_wandb.wait.training_progress import STEP_KEY, Progress

#: Seconds per HTTP request, and for the whole read, retries included (the SDK retries past
#: the first): a W&B that does not answer delays the verdict by at most the deadline.
WANDB_TIMEOUT = 10
WANDB_DEADLINE = 30.0
#: What an unanswered question means for the wait, said once per waiter and question.
_LOG_ALONE = "a silent master is judged by its log alone"
_NO_PROGRESS = "the task log shows no progress until it can"
_TRAINER_ALONE = "a stop from W&B reaches the job through its trainer alone"


class WandbProgress:
    """Asks W&B about one run, for one waiter: its last step (:meth:`last_step`), how far it
    has trained (:meth:`progress`), whether it was stopped (:meth:`stopped`)."""

    def __init__(self, run: WandbRunRef) -> None:
        self.run = run
        self._said_unheard: set[str] = set()

    async def last_step(self, log: logging.Logger | Any) -> WandbStep | None:
        """The run's last step; ``None`` when W&B cannot say (logged once per waiter)."""
        summary = await self._ask(log, "get_run_summary", "the last step", _LOG_ALONE)
        step = None if summary is None else WandbStep.of_summary(summary)
        if summary is not None and step is None:
            self._unheard(log, "the last step", "the run has logged no step yet", _LOG_ALONE)
        return step

    async def progress(self, log: logging.Logger | Any) -> Progress | None:
        """The training's progress as the run's summary reports it (``training_progress``);
        ``None`` when W&B cannot say or the run reports none (logged once per waiter)."""
        summary = await self._ask(log, "get_run_summary", "the progress", _NO_PROGRESS)
        progress = None if summary is None else Progress.of_summary(summary, self.run.summary_keys)
        if summary is not None and progress is None:
            why = f"its summary has no {STEP_KEY!r} yet (docs/trainer.md, the progress contract)"
            self._unheard(log, "the progress", why, _NO_PROGRESS)
        return progress

    async def stopped(self, log: logging.Logger | Any) -> bool:
        """Whether the run was stopped from the W&B UI or API; ``False`` when W&B cannot say
        (logged once per waiter)."""
        return bool(await self._ask(log, "run_stopped", "the stop status", _TRAINER_ALONE))

    async def _ask(self, log: logging.Logger | Any, method: str, what: str, meaning: str) -> Any:
        """``WandbHook.<method>`` of the run, off the event loop; ``None`` when it fails."""
        try:
            return await asyncio.to_thread(_read, self.run, method)
        except Exception as exc:
            self._unheard(log, what, f"{type(exc).__name__}: {exc}", meaning)
            return None

    def _unheard(self, log: logging.Logger | Any, what: str, why: str, meaning: str) -> None:
        if what in self._said_unheard:
            return
        self._said_unheard.add(what)
        log.info("Could not read %s of W&B run %s (%s): %s", what, self.run.run_id, why, meaning)


def _read(run: WandbRunRef, method: str) -> Any:
    """``WandbHook.<method>`` of the run (``get_run_summary`` or ``run_stopped``)."""
    # Imported here, in the thread: the triggerer imports the trigger on its event loop.
    from airflow_volcano_wandb.hooks.wandb import WandbHook

    hook = WandbHook.shared(run.conn_id, timeout=WANDB_TIMEOUT, deadline=WANDB_DEADLINE)
    if not hook.api_key:
        raise LookupError(f"the W&B connection {run.conn_id!r} has no API key")
    return getattr(hook, method)(run.run_id, entity=run.entity, project=run.project)

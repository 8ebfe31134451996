"""The W&B half of the stall timeout: a silent master's run, asked for its last step.

A trainer may log only to W&B. Before a silent master is judged stalled (``stall``), its
online run's summary is read (``_step`` and ``_timestamp``, the time of its last
``wandb.log``) through ``WandbHook.get_run_summary``: blocking, so it runs in a thread (off
the triggerer's event loop) and under the hook's deadline. Whatever keeps W&B from answering
(no key, an error, a run not created yet) leaves the verdict to the log alone, said once per
waiter.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from airflow_volcano_wandb.wait.stall import WandbRunRef, WandbStep

#: Seconds per HTTP request, and for the whole read, retries included (the SDK retries past
#: the first): a W&B that does not answer delays the verdict by at most the deadline.
WANDB_TIMEOUT = 10
WANDB_DEADLINE = 30.0


class WandbProgress:
    """Asks W&B for one run's last step (:meth:`last_step`), for one waiter."""

    def __init__(self, run: WandbRunRef) -> None:
        self.run = run
        self._said_unheard = False

    async def last_step(self, log: logging.Logger | Any) -> WandbStep | None:
        """The run's last step; ``None`` when W&B cannot say (logged once per waiter)."""
        try:
            summary = await asyncio.to_thread(_read_summary, self.run)
        except Exception as exc:
            self._unheard(log, f"{type(exc).__name__}: {exc}")
            return None
        step = WandbStep.of_summary(summary)
        if step is None:
            self._unheard(log, "the run has logged no step yet")
        return step

    def _unheard(self, log: logging.Logger | Any, why: str) -> None:
        if self._said_unheard:
            return
        self._said_unheard = True
        log.info(
            "Could not read the last step of W&B run %s (%s): a silent master is judged by "
            "its log alone",
            self.run.run_id,
            why,
        )


def _read_summary(run: WandbRunRef) -> dict[str, Any]:
    # Imported here, in the thread: the triggerer imports the trigger on its event loop.
    from airflow_volcano_wandb.hooks.wandb import WandbHook

    # A new hook per read: ``wandb.Api`` keeps the runs it loaded, summary included.
    hook = WandbHook(run.conn_id, timeout=WANDB_TIMEOUT, deadline=WANDB_DEADLINE)
    if not hook.api_key:
        raise LookupError(f"the W&B connection {run.conn_id!r} has no API key")
    return hook.get_run_summary(run.run_id, entity=run.entity, project=run.project)

"""The trigger's look at a running job's pods, for the restart budget (``restart_budget``).

A crash-looping trainer under ``restartPolicy: OnFailure`` changes nothing in the Volcano
job's status, so the shared job watch never sees it: while the job runs, the trigger reads
the job's pods (one label-selected LIST over the watch's open client) whenever it wakes, on
the job's changes and on its ``poll_interval`` tick, and ``judge`` holds them to the budget.
A crash loop ends the wait (and, in the operator, deletes the job) only after a fresh GET of
the job and a fresh LIST of its pods, read after the verdict, show it again.

The trigger's ``max_container_restarts`` defaults to ``None`` (not counted), unlike the
operator's and the sensor's: a trigger serialised by a release without the budget keeps
waiting as it did. Imports nothing of the Kubernetes clients: the trigger module that uses it
is imported on the triggerer's event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.wait.judge import WaitTarget, counts_restarts, judge
from airflow_volcano_wandb.wait.outcome import Outcome, WaitResult

if TYPE_CHECKING:
    from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher


async def verdict(
    watcher: NamespaceJobWatcher,
    job: Mapping[str, Any] | None,
    target: WaitTarget,
    log: logging.Logger | Any,
) -> WaitResult | None:
    """A crash loop of ``job``, for a job whose restarts count (``judge.counts_restarts``: a
    budget, and the job running): ``judge``'s ``CRASH_LOOP`` on the job's pods read now, and
    again on a fresh GET of the job and a fresh LIST of its pods. ``None`` (wait on) for
    anything else, and when the pods or the job cannot be read: every other verdict is the
    trigger's next plain judgement's to give.

    :param watcher: the shared watch the trigger waits on (its client reads the pods).
    :param job: the job as the watch last showed it, already judged without its pods.
    :param target: what the wait is about, with ``max_container_restarts``.
    :param log: the trigger's log, for reads that fail.
    """
    if not counts_restarts(job, target):
        return None
    if _crash_loop(job, target, await _pods(watcher, target, log)) is None:
        return None
    try:
        fresh = await watcher.fetch(target.name)
    except Exception as exc:
        log.warning("Could not read Volcano job %s/%s: %s", target.namespace, target.name, exc)
        return None
    return _crash_loop(fresh, target, await _pods(watcher, target, log))


def _crash_loop(
    job: Mapping[str, Any] | None, target: WaitTarget, pods: list[dict] | None
) -> WaitResult | None:
    if pods is None:
        return None
    result = judge(job, target, time.time(), pods=pods)
    return result if result is not None and result.outcome is Outcome.CRASH_LOOP else None


async def _pods(
    watcher: NamespaceJobWatcher, target: WaitTarget, log: logging.Logger | Any
) -> list[dict] | None:
    try:
        return await watcher.list_pods(target.name)
    except Exception as exc:
        # The budget is a bound on a failing job, not the wait's source of truth: a read that
        # fails leaves the job to the watch, and the next tick reads again.
        log.warning(
            "Could not read the pods of Volcano job %s/%s for their restarts: %s",
            target.namespace,
            target.name,
            exc,
        )
        return None

"""A deferrable task first waits in its worker for ``defer_after`` seconds: a job that ends
within them ends the task at once, never deferred (no deferral race, no settle); one still
running then defers as before. The worker slot is held for the window at most; a kill during
it deletes the job, as sync mode's kill does. On the cluster:
``tests/integration/test_defer_after_on_cluster.py``."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from packaging.version import Version

from airflow_volcano_wandb.airflow_compat import INSTALLED_AIRFLOW
from airflow_volcano_wandb.job import deletion
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.operator_parts import OperatorParts
from airflow_volcano_wandb.parts.job_wait import DEFAULT_DEFER_AFTER, JobWait
from airflow_volcano_wandb.parts.waiter import Waiter
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
from airflow_volcano_wandb.wait.outcome import WaitResult
from test_support.waits import JOB

COMPLETED = {
    "outcome": "succeeded",
    "job_name": "j",
    "namespace": "ns",
    "job_uid": "u",
    "message": "done",
}


class Terminated(BaseException):
    """What Airflow raises in a task it sent SIGTERM (``AirflowTaskTerminated`` from Airflow
    3.1; Airflow 3.0 has no such class), after it called ``on_kill``."""


def _waiter(monkeypatch, ends_after: float | None, **options: Any) -> tuple[Waiter, list]:
    """The operator's waiter on ``JOB``, whose wait ends after ``ends_after`` seconds (``None``:
    never; -1: the wait is interrupted, as a kill would; -2: it fails, as a task runner whose
    Celery worker was SIGKILLed does on its supervisor's closed channel); its deletions."""
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", **options)
    op.__dict__["hook"] = object()  # no Kubernetes client: deletion is recorded instead
    waiter = Waiter(op, OperatorParts.of(op), try_number=1)
    waiter.set_job(dict(JOB))
    op.waiter = waiter  # as execute holds it
    deleted: list = []
    monkeypatch.setattr(
        deletion,
        "delete_if_owned",
        lambda hook, job, try_number, log, kill=False: deleted.append(
            (job["uid"], try_number, kill)
        ),
    )

    async def run(self):
        if ends_after is None:
            await asyncio.sleep(3600)
        if ends_after == -2:
            raise BrokenPipeError("[Errno 32] Broken pipe")
        if ends_after < 0:  # SIGTERM: Airflow calls on_kill, then the task ends
            op.on_kill()
            raise Terminated("Task received SIGTERM signal")
        await asyncio.sleep(ends_after)
        yield _Event(COMPLETED)

    monkeypatch.setattr(VolcanoJobTrigger, "run", run)
    return waiter, deleted


class _Event:
    def __init__(self, payload: dict) -> None:
        self.payload = payload


def _wait(waiter: Waiter) -> WaitResult | VolcanoJobTrigger:
    return waiter.wait(JOB, deferred=True, deadline=None, poll_interval=10.0, run_id=None)


def test_a_job_that_ends_within_the_window_ends_the_task_without_a_deferral(monkeypatch):
    waiter, deleted = _waiter(monkeypatch, ends_after=0.05, defer_after=5)
    started = time.monotonic()
    result = _wait(waiter)
    assert isinstance(result, WaitResult) and result.outcome.succeeded
    assert time.monotonic() - started < 2  # when it ended, not at the window's end
    assert deleted == []


def test_a_job_still_running_after_the_window_defers_and_no_later(monkeypatch):
    waiter, deleted = _waiter(monkeypatch, ends_after=None, defer_after=0.3)
    started = time.monotonic()
    trigger = _wait(waiter)
    held = time.monotonic() - started
    assert isinstance(trigger, VolcanoJobTrigger)
    assert 0.3 <= held < 2  # the worker slot, for the window and its teardown only
    assert trigger.spec.deferred_at is not None  # deferred now: the settle guards the race
    assert trigger.spec.deferred_at >= time.time() - held  # not from the window's start
    assert deleted == []  # still running: the triggerer waits on it


def test_the_window_of_0_defers_at_once_without_waiting_here(monkeypatch):
    waiter, _ = _waiter(monkeypatch, ends_after=0.01, defer_after=0)
    assert isinstance(_wait(waiter), VolcanoJobTrigger)


def test_the_window_neither_follows_the_log_nor_settles(monkeypatch):
    """The triggerer follows the master's log after the deferral (when asked): a follow here
    would show its first lines twice; a settle here would hold the slot for nothing."""
    built: list[VolcanoJobTrigger] = []
    original = Waiter.trigger

    def trigger(self, job, **how):
        built.append(original(self, job, **how))
        return built[-1]

    waiter, _ = _waiter(monkeypatch, ends_after=None, defer_after=0.1, follow_master_log=True)
    monkeypatch.setattr(Waiter, "trigger", trigger)
    _wait(waiter)
    window, deferred = (t.spec for t in built)
    assert (window.follow_master_log, window.deferred_at) == (False, None)
    assert deferred.follow_master_log and deferred.deferred_at is not None
    assert window.waiting_since == deferred.waiting_since  # one startup budget for the try


def test_a_kill_during_the_window_deletes_the_job_it_owns(monkeypatch):
    waiter, deleted = _waiter(monkeypatch, ends_after=-1, defer_after=5)
    with pytest.raises(Terminated):
        _wait(waiter)
    # on_kill's alone, by its try (delete_if_owned leaves a newer try's job)
    assert deleted == [("u", 1, True)]


def test_a_failure_during_the_window_that_is_no_kill_leaves_the_job_to_the_next_try(
    monkeypatch,
):
    """A worker lost under its task (Celery's SIGKILLed) is no kill confirmed with Airflow:
    its next try reattaches to the job (tests/reliability/test_celery_airflow.py)."""
    waiter, deleted = _waiter(monkeypatch, ends_after=-2, defer_after=5)
    with pytest.raises(BrokenPipeError):
        _wait(waiter)
    assert deleted == []


def test_the_window_is_seconds_or_0_and_on_by_default_where_supervisor_requests_are_serialized():
    # Airflow 3.2+'s Task SDK locks its supervisor channel; 3.0 and 3.1 do not (job_wait.py).
    expected = 15.0 if Version("3.2") <= INSTALLED_AIRFLOW else 0.0
    assert expected == DEFAULT_DEFER_AFTER
    assert JobWait(defer_after=0).defer_after == 0
    for bad in (-1, "10", True):
        with pytest.raises((TypeError, ValueError)):
            VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", defer_after=bad)

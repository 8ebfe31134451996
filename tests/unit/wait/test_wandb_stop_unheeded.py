"""A W&B run stopped from the W&B UI or API whose trainer does not stop: the wait asks W&B, marks
the job when it first hears the stop, and deletes the job once it has run ``wandb_stop_grace``
past the mark (``wait.wandb_stop``, ``step.asks_wandb_stop``, ``step_io``). On the cluster:
tests/integration/test_stop_from_wandb_on_cluster.py.
"""

from __future__ import annotations

import asyncio
import copy
import logging

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.triggers.wait_spec import WaitSpec
from airflow_volcano_wandb.wait import cleanup, failure_exception, step_io
from airflow_volcano_wandb.wait.judge import JobTarget, WandbRunRef, see
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.step import StepMemory, asks_wandb_stop
from airflow_volcano_wandb.wait.wandb_stop import (
    STOP_SEEN_ANNOTATION,
    WANDB_STOP_CHECK_INTERVAL,
    stop_seen_at,
    stop_seen_mark,
)
from tests.unit.wait.test_wait_verdicts import T0, job

GRACE = 60.0
TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", wandb_stop_grace=GRACE)
RUNNING = job("Running", running={"master": 1, "worker": 2})


def marked(heard_at: float, base: dict = RUNNING) -> dict:
    """``base`` with the mark of a stop first heard at ``heard_at``."""
    marked_job = copy.deepcopy(base)
    marked_job["metadata"]["annotations"] = stop_seen_mark(heard_at)
    return marked_job


class Calls:
    """``step_io.JobCalls`` over a canned fresh GET; records the stop marks written (a step
    also marks the whole gang)."""

    def __init__(self, fresh: dict | Exception | None) -> None:
        self.fresh, self.annotated = fresh, []

    async def fetch(self, name: str) -> dict | None:
        if isinstance(self.fresh, Exception):
            raise self.fresh
        return self.fresh

    async def list_pods(self, job_name: str) -> list[dict]:
        return []

    async def annotate(self, job, annotations) -> bool:
        if STOP_SEEN_ANNOTATION in annotations:
            self.annotated.append(annotations)
        return True

    async def log_since(self, pod: str, container: str, since_seconds: int) -> str:
        raise AssertionError("no stall timeout here")


class Wandb:
    """``wandb_progress.WandbProgress`` answering whether the run was stopped."""

    run = WandbRunRef("wandb_default", "r1", "ml-team", "retraining")

    def __init__(self, stopped: bool) -> None:
        self.answer, self.asked = stopped, 0

    async def stopped(self, log) -> bool:
        self.asked += 1
        return self.answer

    async def progress(self, log) -> None:
        return None


def _step(job, calls, wandb, monkeypatch, memory=None, now=T0):
    monkeypatch.setattr(step_io.time, "time", lambda: now)
    return asyncio.run(
        step_io.take_step(
            calls,
            job,
            TARGET,
            memory or StepMemory(),
            logging.getLogger("t"),
            fresh=False,
            pod_watch=None,
            wandb=wandb,
        )
    )


def test_the_wait_asks_w_and_b_once_a_minute_at_most_and_only_of_a_job_not_ended():
    seen = see(RUNNING, TARGET)
    assert asks_wandb_stop(seen, TARGET, None, T0)
    assert not asks_wandb_stop(seen, TARGET, T0 - 30, T0)
    assert asks_wandb_stop(seen, TARGET, T0 - WANDB_STOP_CHECK_INTERVAL, T0)
    assert not asks_wandb_stop(see(job("Completed"), TARGET), TARGET, None, T0)
    assert not asks_wandb_stop(see(None, TARGET), TARGET, None, T0)
    off = JobTarget(job_name="j", namespace="ns", job_uid="u-1")
    assert not asks_wandb_stop(seen, off, None, T0)
    # A grace shorter than a minute is asked about as often as it lasts.
    short = JobTarget(job_name="j", namespace="ns", job_uid="u-1", wandb_stop_grace=5)
    assert asks_wandb_stop(seen, short, T0 - 5, T0)


def test_the_first_waiter_to_hear_the_stop_marks_the_job_and_waits_on(monkeypatch, caplog):
    calls, wandb = Calls(RUNNING), Wandb(stopped=True)
    with caplog.at_level(logging.INFO):
        memory, result = _step(RUNNING, calls, wandb, monkeypatch)
    assert result is None and calls.annotated == [stop_seen_mark(T0)]
    assert memory.wandb_stop_asked_at == T0 and wandb.asked == 1
    assert "the trainer has 60s (wandb_stop_grace) to end Volcano job ns/j" in caplog.text
    assert stop_seen_at(marked(T0)) == T0


def test_a_job_still_running_a_grace_after_the_mark_ends_the_wait_as_a_stop(monkeypatch):
    overdue = marked(T0 - GRACE)
    _, result = _step(overdue, Calls(overdue), Wandb(stopped=True), monkeypatch)
    assert result.outcome is Ending.STOPPED_FROM_WANDB and result.job_uid == "u-1"
    assert "W&B run r1 was marked stopped" in result.message
    assert "the trainer did not stop by itself within wandb_stop_grace=60s" in result.message
    error = failure_exception.for_failure(result, result.message)
    assert type(error) is exceptions.StoppedFromWandbError
    assert cleanup.deletes_job(result.outcome, "keep")


@pytest.mark.parametrize(
    ("seen_job", "fresh", "stopped"),
    [
        (marked(T0 - GRACE + 1), marked(T0 - GRACE + 1), True),  # within the grace
        (marked(T0 - GRACE), marked(T0 - GRACE), False),  # W&B does not say so again
        (marked(T0 - GRACE), job("Completed"), True),  # it ended meanwhile: its own verdict
        (marked(T0 - GRACE), None, True),  # it is gone
        (marked(T0 - GRACE), RuntimeError("503"), True),  # the apiserver cannot say: no guess
    ],
)
def test_anything_but_a_confirmed_overdue_stop_waits_on(seen_job, fresh, stopped, monkeypatch):
    calls = Calls(fresh)
    assert _step(seen_job, calls, Wandb(stopped), monkeypatch)[1] is None
    assert calls.annotated == []


def test_between_its_questions_the_waiter_does_not_ask_w_and_b(monkeypatch):
    wandb = Wandb(stopped=True)
    memory = StepMemory(wandb_stop_asked_at=T0 - 1)
    assert _step(marked(T0 - GRACE), Calls(RUNNING), wandb, monkeypatch, memory)[1] is None
    assert wandb.asked == 0


def test_a_mark_no_waiter_wrote_is_no_stop_heard():
    garbage = copy.deepcopy(RUNNING)
    garbage["metadata"]["annotations"] = {STOP_SEEN_ANNOTATION: "yesterday"}
    assert stop_seen_at(garbage) is None and stop_seen_at(RUNNING) is None


def test_the_grace_travels_with_the_trigger_and_an_older_trigger_asks_nothing():
    spec = WaitSpec("j", "ns", job_uid="u-1", wandb_stop_grace=GRACE)
    assert WaitSpec.from_kwargs(spec.to_kwargs()).target().wandb_stop_grace == GRACE
    older = {k: v for k, v in spec.to_kwargs().items() if k != "wandb_stop_grace"}
    assert WaitSpec.from_kwargs(older).target().wandb_stop_grace is None


def test_the_event_of_an_unheeded_stop_survives_the_trip_to_the_worker():
    result = WaitResult.stop_unheeded(see(RUNNING, TARGET).status, "r1", GRACE)
    assert WaitResult.from_event(result.to_event()) == result

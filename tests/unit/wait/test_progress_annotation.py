"""The latest progress line on the Volcano Job, for ``kubectl`` (``[volcano_wandb]
progress_annotation``, off by default): written when a line is logged, and only then. On the
cluster: tests/integration/test_progress_on_cluster.py."""

from __future__ import annotations

import asyncio
import dataclasses
import logging

import pytest

from airflow_volcano_wandb.wait import step_io
from airflow_volcano_wandb.wait.judge import JobTarget
from airflow_volcano_wandb.wait.step import StepMemory
from airflow_volcano_wandb.wait.training_progress import PROGRESS_ANNOTATION
from tests.unit.wait.test_training_progress import RUNNING, TARGET, Calls, Wandb, summary
from tests.unit.wait.test_wait_verdicts import T0


class Annotated(Calls):
    """The job's annotations as each write asks them; ``fails``: every write raises."""

    def __init__(self, fails: bool = False) -> None:
        self.writes: list[dict[str, str]] = []
        self.fails = fails

    async def annotate(self, job, annotations) -> bool:
        if self.fails:
            raise ConnectionError("the apiserver is unreachable")
        if PROGRESS_ANNOTATION in annotations:  # not the gang-whole mark
            self.writes.append(dict(annotations))
        return True


def _reads(monkeypatch, calls: Calls, annotate: bool, *reads: tuple[float, dict]) -> list[str]:
    """Each read's step at its moment; the lines logged of the progress."""
    target = dataclasses.replace(TARGET, progress_interval=10, progress_annotation=annotate)
    wandb, memory, lines = Wandb(*(read for _, read in reads)), StepMemory(), []

    class Log:
        def info(self, message: str, *args) -> None:
            lines.append(message % args)

        warning = info

    for now, _ in reads:
        monkeypatch.setattr(step_io.time, "time", lambda now=now: now)
        memory, result = asyncio.run(
            step_io.take_step(
                calls, RUNNING, target, memory, Log(), fresh=True, pod_watch=None, wandb=wandb
            )
        )
        assert result is None
    return [line for line in lines if "progress" in line]


def test_each_progress_line_logged_is_written_on_the_job_and_nothing_else(monkeypatch):
    calls = Annotated()
    reads = [(T0, summary(1200, T0 - 5)), (T0 + 10, summary(1210, T0 + 5))]
    reads.append((T0 + 70, summary(1500, T0 + 65)))  # a minute after the first line
    lines = _reads(monkeypatch, calls, True, *reads)
    logged = [line for line in lines if line.startswith("progress:")]
    assert len(logged) == 2 == len(lines)  # the read 10 s after the first crossed no tenth: no line
    assert calls.writes == [{PROGRESS_ANNOTATION: line} for line in logged]
    assert PROGRESS_ANNOTATION == "airflow-volcano-wandb.io/progress"


def test_off_by_default_no_line_is_written(monkeypatch):
    calls = Annotated()
    lines = _reads(monkeypatch, calls, False, (T0, summary(1200, T0 - 5)))
    assert lines == ["progress: step 1200/4000 (30 %)"] and calls.writes == []
    assert JobTarget(job_name="j", namespace="ns").progress_annotation is False


def test_a_write_that_fails_is_said_and_the_wait_goes_on(monkeypatch):
    lines = _reads(monkeypatch, Annotated(fails=True), True, (T0, summary(1200, T0 - 5)))
    assert lines == [
        "progress: step 1200/4000 (30 %)",
        "Could not record the progress on the job: the apiserver is unreachable",
    ]


@pytest.mark.parametrize(("setting", "on"), [(None, False), ("True", True), ("False", False)])
def test_the_trigger_and_the_sensor_read_it_from_their_config(monkeypatch, setting, on):
    from airflow_volcano_wandb.sensors import VolcanoJobSensor
    from airflow_volcano_wandb.triggers.volcano import target_here
    from airflow_volcano_wandb.triggers.wait_spec import WaitSpec

    if setting is not None:
        monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__PROGRESS_ANNOTATION", setting)
    assert target_here(WaitSpec("j", "ns")).progress_annotation is on
    sensor = VolcanoJobSensor(task_id="wait", job_name="j", namespace="ns")
    assert sensor._target().progress_annotation is on


def test_a_slow_read_puts_the_next_line_no_later_than_a_minute_on(monkeypatch):
    """A read is paced from its due moment, not from its answer: a triggerer's first reads of a
    thousand runs take seconds, and each job's next line must not wait a read more (two
    minutes at the default ``progress_interval``)."""
    clock = [T0]

    class SlowFirstRead(Wandb):
        async def progress(self, log):
            clock[0] += 5.0 if clock[0] == T0 else 0.0  # the first read answers 5 s late
            return await super().progress(log)

    wandb, memory, lines = (
        SlowFirstRead(summary(1200, T0), summary(1500, T0 + 60)),
        StepMemory(),
        [],
    )
    monkeypatch.setattr(step_io.time, "time", lambda: clock[0])
    target = dataclasses.replace(TARGET, progress_interval=60)
    for now in (T0, T0 + 60):
        clock[0] = now
        memory, _ = asyncio.run(
            step_io.take_step(
                Calls(),
                RUNNING,
                target,
                memory,
                logging.getLogger("t"),
                fresh=True,
                pod_watch=None,
                wandb=wandb,
            )
        )
        lines.append(memory.training.logged_at)
    assert lines == [T0, T0 + 60]  # a line at each read, a minute apart

"""How far a training has got, as its trainer reports it (``wait.training_progress``), and the
line a waiting task logs of it (``step_io``). On the cluster:
tests/integration/test_progress_on_cluster.py.
"""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from airflow_volcano_wandb.wait import step_io
from airflow_volcano_wandb.wait.judge import JobTarget, WandbRunRef, see
from airflow_volcano_wandb.wait.step import StepMemory, reads_progress
from airflow_volcano_wandb.wait.training_progress import (
    KEPT_METRICS,
    KEPT_POINTS,
    Progress,
    ProgressSeen,
    keep_metrics,
    observe,
    progress_line,
    record_metrics,
    steps_per_second,
    throughput,
)
from tests.unit.wait.test_wait_verdicts import T0, job

TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", progress_interval=60)
RUNNING = job("Running", running={"master": 1, "worker": 2})


def summary(step: int, at: float, **more) -> dict:
    return {"train/step": step, "train/total_steps": 4000, "_timestamp": at, **more}


def test_a_summary_and_a_log_record_tell_the_same_progress():
    shown = {"eval/accuracy": 0.91, "epoch": 3, "train/epochs": 10}
    from_wandb = Progress.of_summary(summary(1200, T0, **shown), ["eval/accuracy", "nope"])
    record = 'AVW_PROGRESS {"step": 1200, "total_steps": 4000, "epoch": 3, "epochs": 10}'
    from_log = Progress.of_log_line(record, T0)
    assert from_wandb.metrics == {"eval/accuracy": 0.91}
    assert (from_log.step, from_log.total_steps, from_log.epoch, from_log.epochs) == (
        1200,
        4000,
        3,
        10,
    )
    assert from_wandb.fraction == from_log.fraction == 0.3 and from_log.tenth == 3


@pytest.mark.parametrize(
    "line",
    ["epoch 3/10: loss=0.1", "AVW_PROGRESS {not json", "AVW_PROGRESS [1]", "AVW_PROGRESS {}"],
)
def test_anything_but_a_progress_record_is_none(line):
    assert Progress.of_log_line(line, T0) is None
    assert Progress.of_summary({"train/step": True, "_timestamp": T0}) is None


def test_the_line_says_step_percentage_rate_eta_and_the_metrics_asked_for():
    before = Progress(600, T0 - 300, 4000)
    now = Progress(1200, T0, 4000, 3, 10, {"eval/accuracy": 0.91})
    rate = steps_per_second(before, now)
    assert rate == 2.0
    assert progress_line(now, rate) == (
        "progress: step 1200/4000 (30 %), epoch 3/10, 2 steps/s, ETA 23 min, eval/accuracy=0.91"
    )
    assert progress_line(now, None, quiet_for=300) == (
        "progress: step 1200/4000 (30 %), epoch 3/10, no new step for 5 min, eval/accuracy=0.91"
    )
    assert progress_line(Progress(7, T0), None) == "progress: step 7"


def test_a_step_that_went_back_or_no_time_between_has_no_rate():
    assert steps_per_second(Progress(900, T0 - 60), Progress(100, T0)) is None  # a resume
    assert steps_per_second(Progress(100, T0), Progress(100, T0)) is None
    assert steps_per_second(None, Progress(100, T0)) is None


def test_a_line_at_most_once_a_minute_and_at_each_tenth():
    seen, first = observe(ProgressSeen(), Progress(100, T0, 4000), T0)
    assert first == "progress: step 100/4000 (2 %)"  # no rate yet: one report
    seen, line = observe(seen, Progress(200, T0 + 10, 4000), T0 + 10)
    assert line is None  # 10 s later, the same tenth
    seen, line = observe(seen, Progress(450, T0 + 20, 4000), T0 + 20)
    assert line == "progress: step 450/4000 (11 %), 25 steps/s, ETA 2 min"  # a new tenth
    seen, line = observe(seen, Progress(450, T0 + 20, 4000), T0 + 100)
    assert line == "progress: step 450/4000 (11 %), no new step for 80 s"  # a minute, no step


def test_the_wait_reads_progress_once_a_minute_of_a_running_job_only():
    assert reads_progress(see(RUNNING, TARGET), TARGET, None, T0)
    assert not reads_progress(see(RUNNING, TARGET), TARGET, T0 - 30, T0)
    assert reads_progress(see(RUNNING, TARGET), TARGET, T0 - 60, T0)
    assert not reads_progress(see(job("Pending"), TARGET), TARGET, None, T0)
    assert not reads_progress(see(job("Completed"), TARGET), TARGET, None, T0)


class Calls:
    async def fetch(self, name: str) -> dict:
        return RUNNING

    async def list_pods(self, job_name: str) -> list[dict]:
        return []

    async def annotate(self, job, annotations) -> bool:
        return True


class Wandb:
    """``WandbProgress`` over canned summaries, one per read."""

    run = WandbRunRef("wandb_default", "r1", "ml-team", "retraining", ("eval/accuracy",))

    def __init__(self, *summaries: dict) -> None:
        self.summaries = list(summaries)

    async def progress(self, log) -> Progress | None:
        return Progress.of_summary(self.summaries.pop(0), self.run.summary_keys)

    async def stopped(self, log) -> bool:
        return False


def test_a_waiting_task_logs_its_progress_with_a_rate_from_its_second_read(monkeypatch, caplog):
    wandb = Wandb(summary(1200, T0 - 5, **{"eval/accuracy": 0.9}), summary(1500, T0 + 55))
    memory = StepMemory()
    with caplog.at_level(logging.INFO):
        for now in (T0, T0 + 60):
            monkeypatch.setattr(step_io.time, "time", lambda now=now: now)
            memory, result = asyncio.run(
                step_io.take_step(
                    Calls(),
                    RUNNING,
                    TARGET,
                    memory,
                    logging.getLogger("t"),
                    fresh=True,
                    pod_watch=None,
                    wandb=wandb,
                )
            )
            assert result is None
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("progress:")]
    assert lines == [
        "progress: step 1200/4000 (30 %), eval/accuracy=0.9",
        "progress: step 1500/4000 (38 %), 5 steps/s, ETA 8 min",
    ]
    assert memory.progress_read_at == T0 + 60 and memory.training.read.step == 1500


def test_a_finished_runs_throughput_from_its_summary():
    assert throughput({"train/step": 4000, "epoch": 10, "_runtime": 2000.0}) == {
        "steps_per_second": 2.0,
        "seconds_per_epoch": 200.0,
    }
    assert throughput({"train/step": 4000}) == {}  # no runtime: nothing to divide by


def test_a_records_metrics_are_its_finite_numbers_beside_its_progress():
    record = (
        'AVW_PROGRESS {"step": 5, "total_steps": 10, "epoch": 1, "epochs": 2, "world_size": 3,'
        ' "train/epoch_loss": 0.5, "eval/loss": NaN, "note": "x", "lr": 1}'
    )
    assert record_metrics(record) == {"train/epoch_loss": 0.5, "lr": 1.0}
    # What the wait's progress line reads of the record is unchanged: no metric in its line.
    assert progress_line(Progress.of_log_line(record, T0), None) == (
        "progress: step 5/10 (50 %), epoch 1/2, world size 3"
    )
    for other in ["epoch 1/2: loss=0.5", "AVW_PROGRESS {not json", "AVW_PROGRESS [1]"]:
        assert record_metrics(other) == {}


def test_the_kept_series_is_bounded_sampled_and_ends_at_the_last_step():
    """A long training's records: at most KEPT_POINTS per metric, the first and the last step
    kept; a step that went back (a restart from a checkpoint) drops the points after it."""
    kept: dict[str, list[list[float]]] = {}
    for step in range(1, 5001):
        keep_metrics(kept, step, {"loss": 1 / step})
    points = kept["loss"]
    assert len(points) <= KEPT_POINTS and points[0] == [1, 1.0] and points[-1] == [5000, 0.0002]
    assert [s for s, _ in points] == sorted({s for s, _ in points})
    keep_metrics(kept, 3000, {"loss": 0.5})
    assert kept["loss"][-1] == [3000, 0.5] and all(s < 3000 for s, _ in kept["loss"][:-1])
    keep_metrics(kept, 3001, {**{f"m{n}": 1.0 for n in range(20)}, "eval/loss": 2.0})
    assert list(kept) == ["loss", "eval/loss", "m0", "m1"] and len(kept) == KEPT_METRICS
    # The most the trigger's event carries: KEPT_METRICS full series at long steps, as JSON.
    full: dict[str, list[list[float]]] = {}
    for step in range(10**6, 10**6 + KEPT_POINTS):
        keep_metrics(full, step, {f"train/metric_{n}": 1 / 3 for n in range(KEPT_METRICS)})
    assert len(json.dumps(full)) < 20_000

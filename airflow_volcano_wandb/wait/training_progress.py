"""How far a training has got and when it will end, as its trainer reports it (the progress
contract of docs/trainer.md: its W&B run's summary, :data:`STEP_KEY` and the others, or a master
log line ``AVW_PROGRESS {...}``), and the waiting task's line for it (:func:`progress_line`). Pure.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.job.ownership import DOMAIN
from airflow_volcano_wandb.wandb.numbers import finite_number

STEP_KEY = "train/step"
TOTAL_STEPS_KEY = "train/total_steps"
EPOCH_KEY = "epoch"
EPOCHS_KEY = "train/epochs"
#: An elastic trainer's world (docs/trainer.md, "Elastic training"): its processes at the
#: latest (re-)formation.
WORLD_SIZE_KEY = "elastic/world_size"
#: The master log's record: the marker, a space, then the progress as a JSON object.
LOG_RECORD = "AVW_PROGRESS"
#: At most this often a waiter reads the run's progress, and logs a line unless it crossed a
#: tenth of the training since its last one.
READ_INTERVAL = 60.0
#: The job's latest progress line, for ``kubectl`` (``[volcano_wandb] progress_annotation``).
PROGRESS_ANNOTATION = f"{DOMAIN}/progress"
#: An ``AVW_PROGRESS`` record's fields that are progress, not metrics.
RECORD_FIELDS = frozenset({"step", "total_steps", "epoch", "epochs", "world_size"})
#: What a wait keeps of the records' metrics for after the job's end (:func:`keep_metrics`):
#: this many points per metric at most, of this many metrics (the losses first, as the
#: Training tab's chart draws four), each value to 6 digits: under 20 kB of JSON in all.
KEPT_POINTS = 200
KEPT_METRICS = 4
#: The XCom a finished wait pushes them as (``parts/finish``), which the Training tab reads.
METRICS_XCOM = "training_metrics"


@dataclass(frozen=True)
class Progress:
    """One report of the trainer: ``step`` of ``total_steps`` at ``at`` (epoch seconds)."""

    step: int
    at: float
    total_steps: int | None = None
    epoch: int | None = None
    epochs: int | None = None
    #: The metrics shown beside it (the task's ``wandb_summary_keys``), as last logged.
    metrics: Mapping[str, Any] = field(default_factory=dict)
    #: An elastic trainer's world size (:data:`WORLD_SIZE_KEY`); ``None``: not told.
    world_size: int | None = None

    @classmethod
    def of_summary(
        cls, summary: Mapping[str, Any], metric_keys: Sequence[str] = ()
    ) -> Progress | None:
        """The progress a W&B run's summary shows (its last ``wandb.log`` at ``_timestamp``);
        ``None`` when the run reports no step."""
        step = finite_number(summary.get(STEP_KEY), int)
        at = finite_number(summary.get("_timestamp"), float)
        if step is None or at is None:
            return None
        metrics = {key: summary[key] for key in metric_keys if key in summary}
        return cls(
            step,
            at,
            finite_number(summary.get(TOTAL_STEPS_KEY), int),
            finite_number(summary.get(EPOCH_KEY), int),
            finite_number(summary.get(EPOCHS_KEY), int),
            metrics,
            finite_number(summary.get(WORLD_SIZE_KEY), int),
        )

    @classmethod
    def of_log_line(cls, line: str, at: float) -> Progress | None:
        """The progress of a master log line that is an ``AVW_PROGRESS`` record, read at
        ``at``; ``None`` for any other line."""
        fields = _record(line)
        if fields is None:
            return None
        renamed = {
            STEP_KEY: fields.get("step"),
            TOTAL_STEPS_KEY: fields.get("total_steps"),
            EPOCH_KEY: fields.get("epoch"),
            EPOCHS_KEY: fields.get("epochs"),
            WORLD_SIZE_KEY: fields.get("world_size"),
            "_timestamp": at,
        }
        return cls.of_summary(renamed)

    @property
    def fraction(self) -> float | None:
        """How much of the training is done (0 to 1); ``None`` without a total."""
        if not self.total_steps or self.total_steps <= 0:
            return None
        return min(1.0, max(0.0, self.step / self.total_steps))

    @property
    def tenth(self) -> int:
        """The tenths of the training done (0 to 10); 0 without a total."""
        return math.floor((self.fraction or 0.0) * 10)


def record_metrics(line: str) -> dict[str, float]:
    """The numbers of an ``AVW_PROGRESS`` record other than its progress (``"loss": 0.42``);
    ``{}`` for any other line."""
    fields = _record(line) or {}
    numbers = {str(k): finite_number(v, float) for k, v in fields.items() if k not in RECORD_FIELDS}
    return {k: v for k, v in numbers.items() if v is not None}


def _record(line: str) -> dict[str, Any] | None:
    """The JSON object of an ``AVW_PROGRESS`` record; ``None`` for any other line."""
    marker, _, record = line.strip().partition(" ")
    if marker != LOG_RECORD:
        return None
    try:
        fields = json.loads(record)
    except ValueError:
        return None
    return fields if isinstance(fields, dict) else None


def keep_metrics(
    kept: dict[str, list[list[float]]], step: int, metrics: Mapping[str, float]
) -> None:
    """Add a record's ``metrics`` at ``step`` to ``kept``, a sampled series per metric that a
    finished wait hands on (the Training tab's chart once the pods are gone): a step that went
    back (a restart from a checkpoint) drops the points after it; past :data:`KEPT_POINTS`
    every other point goes, the last kept; metrics past :data:`KEPT_METRICS` are left out."""
    # The losses first: sorted() is stable, so the record's order otherwise.
    for key in sorted(metrics, key=lambda key: "loss" not in key):
        value = metrics[key]
        if key not in kept and len(kept) >= KEPT_METRICS:
            continue
        points = kept.setdefault(key, [])
        while points and points[-1][0] >= step:
            points.pop()
        points.append([step, float(f"{value:.6g}")])
        if len(points) > KEPT_POINTS:
            points[:] = points[:-1:2] + points[-1:]


def steps_per_second(before: Progress | None, now: Progress) -> float | None:
    """The rate between two reports; ``None`` when it cannot be told (no earlier report, the
    same moment, or a step that went back: a restart from a checkpoint)."""
    if before is None or now.at <= before.at or now.step < before.step:
        return None
    return (now.step - before.step) / (now.at - before.at)


def due(now: Progress, logged: Progress | None, logged_at: float | None, clock: float) -> bool:
    """Whether a waiter that last logged ``logged`` at ``logged_at`` logs ``now``: at most once
    a minute, and at each tenth of the training reached."""
    if logged is None or logged_at is None:
        return True
    return now.tenth > logged.tenth or clock - logged_at >= READ_INTERVAL


def progress_line(now: Progress, rate: float | None, quiet_for: float | None = None) -> str:
    """The task log's line for ``now``, at ``rate`` steps per second; ``quiet_for``: seconds
    since its step last moved, when it has not since the last read."""
    parts = [f"step {now.step}/{now.total_steps}" if now.total_steps else f"step {now.step}"]
    if now.fraction is not None:
        parts[0] += f" ({now.fraction * 100:.0f} %)"
    if now.epoch is not None:
        parts.append(f"epoch {now.epoch}/{now.epochs}" if now.epochs else f"epoch {now.epoch}")
    if now.world_size is not None:
        parts.append(f"world size {now.world_size}")
    if quiet_for is not None:
        parts.append(f"no new step for {_duration(quiet_for)}")
    elif rate:
        parts.append(f"{rate:.3g} steps/s")
        if now.total_steps and now.total_steps > now.step:
            parts.append(f"ETA {_duration((now.total_steps - now.step) / rate)}")
    parts += [f"{key}={_shown(value)}" for key, value in now.metrics.items()]
    return "progress: " + ", ".join(parts)


def throughput(summary: Mapping[str, Any]) -> dict[str, float]:
    """A finished run's steps per second and seconds per epoch over its W&B ``_runtime``;
    what cannot be told is left out."""
    runtime = finite_number(summary.get("_runtime"), float)
    if not runtime or runtime <= 0:
        return {}
    rates: dict[str, float] = {}
    step = finite_number(summary.get(STEP_KEY), float)
    epoch = finite_number(summary.get(EPOCH_KEY), float)
    if step:
        rates["steps_per_second"] = round(step / runtime, 4)
    if epoch:
        rates["seconds_per_epoch"] = round(runtime / epoch, 2)
    return rates


@dataclass(frozen=True)
class ProgressSeen:
    """What a waiter remembers of the training's progress between its reads."""

    #: The last report read, and when (the waiter's clock) its step last moved.
    read: Progress | None = None
    moved_at: float | None = None
    #: The last rate told (steps per second), kept while the step does not move.
    rate: float | None = None
    #: The last report logged, and when.
    logged: Progress | None = None
    logged_at: float | None = None


def observe(seen: ProgressSeen, now: Progress, clock: float) -> tuple[ProgressSeen, str | None]:
    """What the waiter remembers after reading ``now`` at ``clock``, and the line to log
    (``None``: not :func:`due`, and no elastic world :func:`reformed`)."""
    before = seen.read
    moved = before is None or now.step != before.step
    moved_at = clock if moved or seen.moved_at is None else seen.moved_at
    rate = steps_per_second(before, now) if moved else seen.rate
    quiet = None if moved else clock - moved_at
    change = reformed(before, now)  # told at once, due or not
    if not change and not due(now, seen.logged, seen.logged_at, clock):
        return ProgressSeen(now, moved_at, rate, seen.logged, seen.logged_at), None
    line = progress_line(now, rate or seen.rate, quiet) + change
    return ProgressSeen(now, moved_at, rate or seen.rate, now, clock), line


def reformed(before: Progress | None, now: Progress) -> str:
    """`` - re-formed: world size 3 (was 4), resumed from step 1,700`` when an elastic
    trainer's world changed since the last read (it logs the step it resumed at first)."""
    if before is None or None in (before.world_size, now.world_size):
        return ""
    if before.world_size == now.world_size:
        return ""
    return (
        f" - re-formed: world size {now.world_size} (was {before.world_size}), "
        f"resumed from step {now.step:,}"
    )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _shown(value: Any) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)

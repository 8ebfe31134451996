"""What the Training tab and page show, from what was read (pure): the job's identity and phase,
each rank as it is placed, the progress bar's figures, the metrics' points over steps, the
pending reason, the GPU-hours and the links; and, once the pods are gone, the last state from
what the provider kept (its XComs). Nothing here reads a Secret or the W&B key: the page shows
only the fields named below.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from airflow_volcano_wandb.job.gpu_usage import gpu_seconds
from airflow_volcano_wandb.job.job_view import JobView, ObjectMeta
from airflow_volcano_wandb.logs.log_lines import split_timestamp, stamp_seconds
from airflow_volcano_wandb.template.gpus import pod_gpus
from airflow_volcano_wandb.wait.training_progress import (
    EPOCH_KEY,
    EPOCHS_KEY,
    METRICS_XCOM,
    PROGRESS_ANNOTATION,
    STEP_KEY,
    TOTAL_STEPS_KEY,
    Progress,
    record_metrics,
    steps_per_second,
)
from airflow_volcano_wandb.wandb.numbers import finite_number

#: The pod label Volcano names a pod's task by.
TASK_SPEC_LABEL = "volcano.sh/task-spec"
#: The task instance states in which a job is still waited on.
WAITING_STATES = frozenset({"running", "deferred", "up_for_reschedule", "queued", "scheduled"})
#: The summary's keys the bar shows: not metrics of the chart.
PROGRESS_KEYS = frozenset({STEP_KEY, TOTAL_STEPS_KEY, EPOCH_KEY, EPOCHS_KEY})
#: The Volcano phases of a job that has ended.
ENDED_PHASES = frozenset({"Completed", "Failed", "Aborted", "Terminated"})
#: At most this many points per metric are kept for a job's chart.
MAX_POINTS = 500


@dataclass(frozen=True)
class Kept:
    """What the provider kept of a task instance's job (its XComs) and the task's state."""

    state: str | None = None
    job: Mapping[str, Any] = field(default_factory=dict)
    run_id: str | None = None
    run_url: str | None = None
    gpu_seconds: Mapping[str, Any] | None = None
    summary: Mapping[str, Any] | None = None
    #: The finished wait's sampled metrics (``training_metrics``): the chart once pods are gone.
    metrics: Mapping[str, list[list[float]]] = field(default_factory=dict)

    @classmethod
    def of_xcoms(cls, xcoms: Mapping[str, Any], state: str | None) -> Kept:
        """From the task instance's XComs by key (``volcano_job``, ``wandb_run_id``, ...)."""
        job = xcoms.get("volcano_job")
        gpus = xcoms.get("gpu_seconds")
        summary = xcoms.get("wandb_summary")
        return cls(
            state,
            {k: str(v) for k, v in job.items() if k in ("name", "namespace", "uid")}
            if isinstance(job, Mapping)
            else {},
            _text(xcoms.get("wandb_run_id")),
            web_link(xcoms.get("wandb_run_url")),
            gpus if isinstance(gpus, Mapping) else None,
            summary if isinstance(summary, Mapping) else None,
            _kept_points(xcoms.get(METRICS_XCOM)),
        )

    @property
    def waiting(self) -> bool:
        return self.state in WAITING_STATES


def live(kept: Kept, job: Mapping[str, Any] | None) -> bool:
    """Whether the page keeps refreshing: its task waits, or its job is there and not ended
    (an operator that does not wait, ``wait_for_completion=False``, has a job that runs on)."""
    return kept.waiting or (job is not None and JobView.of(job).phase not in ENDED_PHASES)


@dataclass
class Series:
    """A job's progress reports in order (the chart's points, the bar's last figures and rate)."""

    last: Progress | None = None
    rate: float | None = None
    #: The first report of the last step (the rate runs from step to step).
    moved: Progress | None = None
    points: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    @classmethod
    def of(cls, reports: Iterable[Progress]) -> Series:
        series = cls()
        for now in reports:
            series.add(now)
        return series

    def add(self, now: Progress | None) -> None:
        """Take ``now`` in: its rate since its last step was first reported, its metrics
        as points (a step that went back, a restart from a checkpoint, drops those after it)."""
        if now is None or (self.last is not None and now.at < self.last.at):
            return
        if self.last is None or now.step != self.last.step:
            rate = steps_per_second(self.moved, now)
            self.rate, self.moved = (self.rate if rate is None else rate), now
        self.last = now
        for key, value in now.metrics.items():
            number = finite_number(value, float)
            if number is None:
                continue
            points = self.points.setdefault(key, [])
            if points and points[-1][0] >= now.step:
                del points[next(i for i, p in enumerate(points) if p[0] >= now.step) :]
            points.append((now.step, number))
            del points[:-MAX_POINTS]


def history_reports(
    summary: Mapping[str, Any] | None, rows: Sequence[Mapping[str, Any]]
) -> list[Progress]:
    """A W&B run's history rows as reports, each at its training step (the last ``train/step``
    logged, else the row's ``_step``) with the run's totals from its summary; without rows,
    the summary alone."""
    totals = {k: v for k, v in (summary or {}).items() if k in (TOTAL_STEPS_KEY, EPOCHS_KEY)}
    reports, step = [], None
    for row in rows:
        step = row.get(STEP_KEY, step)
        now = progress_of({**totals, **row, STEP_KEY: row.get("_step") if step is None else step})
        reports.append(now)
    found = [r for r in reports if r is not None]
    return found or [r for r in [progress_of(summary)] if r is not None]


def log_reports(text: str) -> list[Progress]:
    """The ``AVW_PROGRESS`` records of a master log read with timestamps, each timed by its
    stamp, with the record's other numeric fields (``"loss": 0.42``) as its metrics."""
    reports = []
    for line in text.splitlines():
        stamp, record = split_timestamp(line)
        if stamp is None:
            continue
        now = Progress.of_log_line(record, stamp_seconds(stamp))
        if now is not None:
            reports.append(replace(now, metrics=record_metrics(record)))
    return reports


def progress_of(summary: Mapping[str, Any] | None) -> Progress | None:
    """The progress a W&B run's summary shows, with every numeric metric."""
    if not summary:
        return None
    keys = [
        key
        for key, value in summary.items()
        if not key.startswith("_")
        and key not in PROGRESS_KEYS
        and finite_number(value, float) is not None
    ]
    return Progress.of_summary(summary, keys)


def ranks(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> list[dict]:
    """One row per pod: its rank, task, node, phase, restarts and GPUs, sorted by rank."""
    name = JobView.of(job).name if job else ""
    rows = []
    for pod in pods:
        meta = ObjectMeta.of(pod)
        status = pod.get("status") or {}
        restarts = sum(
            int(s.get("restartCount") or 0) for s in status.get("containerStatuses") or []
        )
        rows.append(
            {
                "pod": meta.name,
                "rank": meta.name.removeprefix(f"{name}-") if name else meta.name,
                "task": meta.labels.get(TASK_SPEC_LABEL, ""),
                "node": (pod.get("spec") or {}).get("nodeName") or "",
                "phase": "Terminating" if meta.deletion_timestamp else status.get("phase", ""),
                "restarts": restarts,
                "gpus": pod_gpus(pod),
            }
        )
    return sorted(rows, key=lambda row: row["rank"])


def pending_reason(job: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]) -> str:
    """Why the gang waits: a pod's unschedulable message, else the job's own, else ""."""
    for pod in pods:
        for condition in (pod.get("status") or {}).get("conditions") or []:
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return str(condition.get("message") or condition.get("reason") or "")
    view = JobView.of(job) if job else None
    if view is not None and view.phase == "Pending":
        return view.message or view.reason or "waiting for the gang to be placed"
    return ""


def progress_figures(now: Progress | None, rate: float | None) -> dict | None:
    """The bar's figures: step, total, percent, rate and ETA (the same as the progress lines)."""
    if now is None:
        return None
    left = (now.total_steps - now.step) if now.total_steps else None
    return {
        "step": now.step,
        "total_steps": now.total_steps,
        "percent": None if now.fraction is None else round(now.fraction * 100, 1),
        "epoch": now.epoch,
        "epochs": now.epochs,
        "rate": None if rate is None else round(rate, 4),
        "eta_seconds": round(left / rate) if rate and left and left > 0 else None,
    }


def task_view(
    kept: Kept,
    job: Mapping[str, Any] | None,
    pods: Sequence[Mapping[str, Any]],
    series: Series,
    now: float,
    task_url: str = "",
) -> dict:
    """The Training tab's model of one task instance's job."""
    view = JobView.of(job) if job else None
    name = view.name if view else kept.job.get("name", "")
    used = gpu_seconds(pods, name, now) if pods else {}
    kept_gpus = {k: v for k, v in (kept.gpu_seconds or {}).items() if isinstance(v, int | float)}
    gpu_total = sum(kept_gpus.values()) if kept_gpus and not used else sum(used.values())
    progress = series.last or progress_of(kept.summary)
    annotation = view.meta.annotations.get(PROGRESS_ANNOTATION, "") if view else ""
    return {
        "found": bool(name),
        "job": {
            "name": name,
            "namespace": view.meta.namespace if view else kept.job.get("namespace", ""),
            "phase": view.phase if view else "",
            "gone": job is None and bool(name),
        },
        "task_state": kept.state,
        "waiting": live(kept, job),
        "ranks": ranks(job, pods),
        # An ended job has no rate nor ETA: its last figures stay, its clock stops.
        "progress": progress_figures(progress, series.rate if live(kept, job) else None),
        "progress_line": annotation,
        "percent": _percent(annotation),  # the bar's width without a report (a job's kept line)
        # The W&B run's history or the pods' log, else what the finished wait kept of the log.
        "metrics": {k: [list(p) for p in v] for k, v in (series.points or kept.metrics).items()},
        "pending_reason": pending_reason(job, pods) if live(kept, job) else "",
        "gpu_hours": round(gpu_total / 3600, 3),
        "links": {"wandb_run": kept.run_url, "task": task_url},
    }


def list_row(
    dag_id: str,
    task_id: str,
    run_id: str,
    map_index: int,
    kept: Kept,
    job: Mapping[str, Any] | None,
    progress: Progress | None = None,
) -> dict:
    """One row of the Training page: the job of a waiting task instance, from its LIST entry
    (its phase, GPUs asked for and the progress annotation) and its W&B run's ``progress``."""
    view = JobView.of(job) if job else None
    gpus = sum(pod_gpus(t.template) * t.replicas for t in view.tasks) if view else 0
    line = view.meta.annotations.get(PROGRESS_ANNOTATION, "") if view else ""
    figures = progress_figures(progress, None)
    return {
        "dag_id": dag_id,
        "task_id": task_id,
        "run_id": run_id,
        "map_index": map_index,
        "job": kept.job.get("name", ""),
        "namespace": kept.job.get("namespace", ""),
        "phase": view.phase if view else "",
        "task_state": kept.state,
        "gpus": gpus,
        "progress": figures,
        "percent": figures["percent"] if figures else _percent(line),
        "progress_line": line.removeprefix("progress: "),
        "wandb_run": kept.run_url,
    }


def _percent(line: str) -> float | None:
    """The percentage a progress line gives (``step 120/1000 (12 %)``), or ``None``."""
    head, sep, _ = line.partition(" %)")
    if not sep:
        return None
    try:
        return finite_number(float(head.rpartition("(")[2]), float)
    except ValueError:
        return None


def _kept_points(value: Any) -> dict[str, list[list[float]]]:
    """The ``training_metrics`` XCom's series, each point a finite ``[step, value]``."""
    kept: dict[str, list[list[float]]] = {}
    for key, points in (value if isinstance(value, Mapping) else {}).items():
        listed = points if isinstance(points, list) else []
        pairs = [p for p in listed if isinstance(p, list | tuple) and len(p) == 2]
        numbers = [(finite_number(s, int), finite_number(v, float)) for s, v in pairs]
        if found := [[s, v] for s, v in numbers if s is not None and v is not None]:
            kept[str(key)] = found
    return kept


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def web_link(value: Any) -> str | None:
    """A W&B run's URL, only when it is an http(s) address (the page makes it a link)."""
    text = _text(value)
    return text if text and text.startswith(("https://", "http://")) else None

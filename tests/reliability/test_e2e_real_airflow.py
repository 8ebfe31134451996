"""The ``e2e_real_airflow`` benchmark's driver (issue 26): job ``Completed`` to task success
through the real scheduler and triggerer of the production-shaped stack.

Marked ``long`` (not in ``make test``): ``bench/run_all.py --only e2e_real_airflow`` runs it as
a child process (the benchmarks import nothing from ``tests/``) and reads its figures from
``test-artifacts/reliability/e2e_real_airflow.json``; ``make test-long`` runs it too.

``AVW_E2E_REAL_TASKS`` deferred tasks (10; the bench asks for 50) on the session's stack
(``reliability_airflow``: PostgreSQL, two schedulers with the LocalExecutor, two triggerers),
in waves of
``AVW_E2E_REAL_WAVE`` (10) so that one wave's resumptions do not queue behind the next
wave's first tries. Each task's job is in a namespace of its own; half end at once (the
master runs 1 s: the job is ``Completed`` while its trigger still waits out
``defer_settle_seconds``) and half end after the settle (the master runs
``settle + 30`` s). A watch of this process on every Volcano job records the moment each job
is seen ``Completed``; the task's end is its ``end_date`` in Airflow (same machine clock).

Beside each wave run as many tasks of two kinds of Airflow's own (``dags/avw_floor_dags.py``),
each waiting with Airflow's ``DateTimeTrigger`` as long after its deferral as the provider's
task of the same kind (``FLOOR_AFTER_S``): one that resumes on a worker and only returns
(``avw_floor_resume``), and ``DateTimeSensorAsync`` ending in the triggerer
(``avw_floor_sensor``). For every task of the three kinds: the trigger's fire (the
triggerer's ``Trigger fired event`` line in the trigger's log) to the task's ``end_date``, and
for those resumed on a worker the steps between (``STEPS``: ``scheduled_when``, set as the
triggerer writes the event; ``queued_when``; then the resumed process's task log lines:
its first, the DAG file parsed, ``Post Execute``; and the provider's own lines inside
``execute_complete``, ``PROVIDER_MARKS``). The task instance's ``start_date`` is its first
try's, so it tells nothing of the resumed process.

Asserted: every task succeeds on its first try. Times are figures, never asserted.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics
import threading
import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, watch

from airflow_volcano_wandb.triggers.volcano import DEFAULT_DEFER_SETTLE_SECONDS
from test_support.airflow_runs import ARTIFACTS, Run, Watched
from test_support.cluster_jobs import SIM_DURATION, seed_template
from tests.e2e.airflow_stack import AirflowStack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.long, pytest.mark.timeout(7200)]

DAG_ID = "avw_rel_deferred"
TASKS = int(os.environ.get("AVW_E2E_REAL_TASKS", "10"))  # the bench passes 50
WAVE = int(os.environ.get("AVW_E2E_REAL_WAVE", "10"))
SETTLE_S = DEFAULT_DEFER_SETTLE_SECONDS  # the stack leaves [volcano_wandb] at its default
KINDS = {"ends_at_once": 1.0, "ends_after_settle": SETTLE_S + 30}
FIGURES = ARTIFACTS / "e2e_real_airflow.json"
#: Airflow's own deferrable tasks run beside the provider's (``dags/avw_floor_dags.py``).
FLOOR_DAGS = {
    "airflow_resume_on_worker": "avw_floor_resume",
    "airflow_sensor_in_triggerer": "avw_floor_sensor",
}
#: Seconds from their deferral to their trigger's fire: as the provider's of each kind (the
#: settle, or the job's run; its start comes on top of that).
FLOOR_AFTER_S = {kind: max(SETTLE_S, runs) for kind, runs in KINDS.items()}
#: The steps from the trigger's fire to the task's end of a task resumed on a worker: the
#: task instance's timestamps (``scheduled_when`` is set as the triggerer writes the event)
#: and the lines of the resumed process's task log.
STEPS = (
    ("fired", "scheduled_when", "fired_to_scheduled_s"),  # the triggerer wrote the event
    ("scheduled_when", "queued_when", "scheduled_to_queued_s"),  # a scheduler queued it
    ("queued_when", "process", "queued_to_process_s"),  # an executor slot, the task process
    ("process", "parsed", "dag_parse_s"),  # the DAG file parsed: the imports of its operators
    ("parsed", "post_execute", "execute_complete_s"),  # execute_complete
    ("post_execute", "end_date", "post_execute_s"),  # its return value pushed, the end
)
#: Lines of the resumed task log that mark the steps (the first at or after the fire).
MARKS = {
    "process": "::group::Pre Execute",
    "parsed": "Worker startup parse complete",
    "post_execute": "::group::Post Execute",
}
#: Within the provider's ``execute_complete``: its lines (after the parse), each with what ran
#: before it since the previous one.
PROVIDER_MARKS = (
    ("completed_line", " Completed", "job marked reported (PATCH) and read"),
    ("gpu_seconds_line", "GPU-seconds:", "the job's pods listed"),
    ("master_tail_line", "[wandb-job-", "XCom gpu_seconds; the master's log read"),
    ("link_back_line", "W&B", "the task state store; the W&B run's link back"),
    ("deleted_line", "Deleted Volcano job", "the job read and deleted"),
    ("post_execute", "::group::Post Execute", "summary, return"),
)


class CompletedSeen:
    """One watch on every Volcano job: when each namespace's job was first seen Completed."""

    def __init__(self, api) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.at: dict[str, float] = {}
        self._stop = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in watch.Watch().stream(
                    self.custom.list_cluster_custom_object,
                    "batch.volcano.sh",
                    "v1alpha1",
                    "jobs",
                    timeout_seconds=60,
                ):
                    job = event["object"]
                    phase = ((job.get("status") or {}).get("state") or {}).get("phase")
                    namespace = job["metadata"]["namespace"]
                    if phase == "Completed" and namespace not in self.at:
                        self.at[namespace] = time.time()
            except Exception:
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()


def _time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _percentile(values: list[float], q: float) -> float:
    """Nearest rank (as bench/common.py): with fewer than 100 values, p99 is the maximum."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def _summary(values: list[float]) -> dict:
    if not values:
        return {"n": 0, "p50": None, "p99": None}
    return {
        "n": len(values),
        "p50": round(statistics.median(values), 2),
        "p99": round(_percentile(values, 99), 2),
        "min": round(min(values), 2),
        "max": round(max(values), 2),
    }


def _start(stack: AirflowStack, volcano_cluster, api, index: int, kind: str) -> Run:
    namespace = volcano_cluster.create_namespace(f"e2e-real-{index}")
    duration = str(KINDS[kind])
    template = seed_template(master={SIM_DURATION: duration}, worker={SIM_DURATION: duration})
    run_id = f"e2e-real-{index}-{kind}-{uuid.uuid4().hex[:6]}"
    stack.trigger(DAG_ID, run_id, {"template": template, "namespace": namespace})
    return Run(stack, DAG_ID, run_id, Watched(api, namespace))


def _start_floor(stack: AirflowStack, dag_id: str, index: int, kind: str) -> Run:
    run_id = f"floor-{index}-{kind}-{uuid.uuid4().hex[:6]}"
    stack.trigger(dag_id, run_id, {"after_s": FLOOR_AFTER_S[kind]})
    return Run(stack, dag_id, run_id, watched=None)  # type: ignore[arg-type]


def _log_lines(path: Path) -> list[tuple[float, str]]:
    """A JSON-lines Airflow log as (wall time, event) pairs; lines of another shape skipped."""
    lines = []
    for text in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(text)
            lines.append((_time(entry["timestamp"]), str(entry.get("event", ""))))
        except (ValueError, KeyError, TypeError):
            continue
    return lines


def _task_dir(stack: AirflowStack, run: Run) -> Path:
    return (
        stack.log_dir / "tasks" / f"dag_id={run.dag_id}" / f"run_id={run.run_id}" / "task_id=train"
    )


def _fired_at(stack: AirflowStack, run: Run) -> float | None:
    """When the trigger fired: the triggerer's ``Trigger fired event`` line in the trigger's
    log (the first, should two triggerers have run it)."""
    fired = [
        at
        for path in _task_dir(stack, run).glob("attempt=1.log.trigger.*.log")
        for at, event in _log_lines(path)
        if event == "Trigger fired event"
    ]
    return min(fired) if fired else None


def _resumed_lines(stack: AirflowStack, run: Run, since: float) -> list[tuple[float, str]]:
    """The task log's lines from ``since`` on: the resumed process's."""
    path = _task_dir(stack, run) / "attempt=1.log"
    if not path.exists():
        return []
    return [(at, event) for at, event in _log_lines(path) if at >= since]


def _first(lines: list[tuple[float, str]], mark: str, after: float | None) -> float | None:
    if after is None:
        return None
    return next((at for at, event in lines if at >= after and mark in event), None)


def _provider_steps(lines: list[tuple[float, str]], parsed: float | None) -> dict:
    """Seconds before each of the provider's lines in ``execute_complete`` since the one
    before (from the end of the parse); a line not found counts with the next."""
    steps, previous = {}, parsed
    for name, mark, _ in PROVIDER_MARKS:
        at = _first(lines, mark, previous)
        if at is not None and previous is not None:
            steps[name] = round(at - previous, 3)
            previous = at
    return steps


def _ended_row(stack: AirflowStack, run: Run, family: str, kind: str) -> dict:
    ti = run.wait_ended(timeout=900)
    times = {key: _time(ti.get(key)) for key in ("scheduled_when", "queued_when", "start_date")}
    times["end_date"] = ended = _time(ti.get("end_date"))
    times["fired"] = fired = _fired_at(stack, run)
    row = {
        "run_id": run.run_id,
        "family": family,
        "kind": kind,
        "state": ti["state"],
        "try_number": ti["try_number"],
        "fired_to_success_s": round(ended - fired, 3) if ended and fired else None,
    }
    if family != "airflow_sensor_in_triggerer" and fired:  # resumed on a worker: the steps
        lines = _resumed_lines(stack, run, fired)
        times["process"] = _first(lines, MARKS["process"], fired)
        times["parsed"] = _first(lines, MARKS["parsed"], times["process"])
        times["post_execute"] = _first(lines, MARKS["post_execute"], times["parsed"])
        for start, end, name in STEPS:
            a, b = times[start], times[end]
            row[name] = round(b - a, 3) if a and b else None
        if family == "provider":
            row["execute_complete_steps_s"] = _provider_steps(lines, times["parsed"])
            row["resumed_log"] = [[round(at - fired, 3), event[:160]] for at, event in lines]
    return row


def test_job_completed_to_task_success_through_the_real_scheduler_and_triggerer(
    reliability_airflow, volcano_cluster, admin
):
    stack = reliability_airflow
    wait_for(lambda: stack.api("GET", f"/dags/{DAG_ID}"), 240, f"DAG {DAG_ID}")
    for dag_id in (DAG_ID, *FLOOR_DAGS.values()):
        wait_for(lambda d=dag_id: stack.api("GET", f"/dags/{d}"), 240, f"DAG {dag_id}")
        stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    seen = CompletedSeen(admin)
    kinds = list(KINDS)
    rows: list[dict] = []
    began = time.monotonic()
    namespaces: list[str] = []
    try:
        for first in range(0, TASKS, WAVE):
            wave = [
                (_start(stack, volcano_cluster, admin, i, kinds[i % 2]), kinds[i % 2])
                for i in range(first, min(first + WAVE, TASKS))
            ]
            floor = [
                (_start_floor(stack, dag_id, i, kinds[i % 2]), family, kinds[i % 2])
                for i in range(first, min(first + WAVE, TASKS))
                for family, dag_id in FLOOR_DAGS.items()
            ]
            namespaces += [run.watched.namespace for run, _ in wave]
            for run, kind in wave:
                ti = run.wait_ended(timeout=900)
                completed = seen.at.get(run.watched.namespace)
                ended = _time(ti.get("end_date"))
                rows.append(
                    {
                        "run_id": run.run_id,
                        "family": "provider",
                        "kind": kind,
                        "state": ti["state"],
                        "try_number": ti["try_number"],
                        "completed_to_success_s": (
                            round(ended - completed, 3) if ended and completed else None
                        ),
                        "task_s": round(ended - _time(ti["start_date"]), 3)
                        if ended and ti.get("start_date")
                        else None,
                        **_ended_row(stack, run, "provider", kind),
                    }
                )
            for run, family, kind in floor:
                rows.append(_ended_row(stack, run, family, kind))
            _figures(rows, began)  # written after every wave: a run cut short still tells
            print(f"e2e_real_airflow: {len(rows)} of {TASKS} tasks ended", flush=True)
    finally:
        seen.stop()
        for namespace in namespaces:
            volcano_cluster.delete_namespace(namespace)
    figures = _figures(rows, began)
    print(f"e2e_real_airflow: {json.dumps(figures, indent=2)}")
    assert not figures["wrong"], figures["wrong"]
    assert len(rows) == TASKS * (1 + len(FLOOR_DAGS))


def _floor(rows: list[dict]) -> dict:
    """Trigger fired to success of each family, the steps between, and the provider's median
    over Airflow's own resume-on-worker median (the goal: at most 1.2)."""
    families: dict = {}
    for family in ("provider", *FLOOR_DAGS):
        mine = [r for r in rows if r["family"] == family and r["state"] == "success"]
        values = [r["fired_to_success_s"] for r in mine if r["fired_to_success_s"] is not None]
        figures = {"fired_to_success_s": _summary(values)}
        if family != "airflow_sensor_in_triggerer":
            for _, _, name in STEPS:
                figures[name] = _summary([r[name] for r in mine if r.get(name) is not None])
        if family == "provider":
            figures["execute_complete_steps_s"] = {
                name: {
                    "before_it": what,
                    **_summary(
                        [
                            r["execute_complete_steps_s"][name]
                            for r in mine
                            if name in r.get("execute_complete_steps_s", {})
                        ]
                    ),
                }
                for name, _, what in PROVIDER_MARKS
            }
        families[family] = figures
    provider = families["provider"]["fired_to_success_s"]["p50"]
    floor = families["airflow_resume_on_worker"]["fired_to_success_s"]["p50"]
    families["ratio_provider_to_resume_on_worker"] = (
        round(provider / floor, 2) if provider and floor else None
    )
    return families


def _figures(rows: list[dict], began: float) -> dict:
    """The figures of the tasks ended so far, also written to ``FIGURES``."""
    provider_rows = [r for r in rows if r["family"] == "provider"]
    figures: dict = {
        "tasks": len(provider_rows),
        "planned": TASKS,
        "wave": WAVE,
        "defer_settle_seconds": SETTLE_S,
        "schedulers": 2,
        "triggerers": 2,
        "wall_s": round(time.monotonic() - began, 1),
        "wrong": [r for r in rows if (r["state"], r["try_number"]) != ("success", 1)][:5],
    }
    for kind, duration in KINDS.items():
        mine = [r for r in provider_rows if r["kind"] == kind and r["state"] == "success"]
        figures[kind] = {
            "job_runs_s": duration,
            "completed_to_success_s": _summary(
                [r["completed_to_success_s"] for r in mine if r["completed_to_success_s"]]
            ),
            "task_s": _summary([r["task_s"] for r in mine if r["task_s"]]),
        }
    both = [r["completed_to_success_s"] for r in provider_rows if r["completed_to_success_s"]]
    figures["all"] = {"completed_to_success_s": _summary(both)}
    figures["trigger_fired_to_success"] = _floor(rows)
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps({**figures, "runs": rows}, indent=2) + "\n")
    return figures

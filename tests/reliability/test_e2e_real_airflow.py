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

import pytest
from kubernetes import client, watch

from airflow_volcano_wandb.triggers.volcano import DEFAULT_DEFER_SETTLE_SECONDS
from tests.e2e.airflow_stack import AirflowStack, wait_for
from tests.integration.jobs import SIM_DURATION, seed_template
from tests.reliability.airflow_runs import ARTIFACTS, Run, Watched

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.long, pytest.mark.timeout(7200)]

DAG_ID = "avw_rel_deferred"
TASKS = int(os.environ.get("AVW_E2E_REAL_TASKS", "10"))  # the bench passes 50
WAVE = int(os.environ.get("AVW_E2E_REAL_WAVE", "10"))
SETTLE_S = DEFAULT_DEFER_SETTLE_SECONDS  # the stack leaves [volcano_wandb] at its default
KINDS = {"ends_at_once": 1.0, "ends_after_settle": SETTLE_S + 30}
FIGURES = ARTIFACTS / "e2e_real_airflow.json"


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


def test_job_completed_to_task_success_through_the_real_scheduler_and_triggerer(
    reliability_airflow, volcano_cluster, admin
):
    stack = reliability_airflow
    wait_for(lambda: stack.api("GET", f"/dags/{DAG_ID}"), 240, f"DAG {DAG_ID}")
    stack.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
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
            namespaces += [run.watched.namespace for run, _ in wave]
            for run, kind in wave:
                ti = run.wait_ended(timeout=900)
                completed = seen.at.get(run.watched.namespace)
                ended = _time(ti.get("end_date"))
                rows.append(
                    {
                        "run_id": run.run_id,
                        "kind": kind,
                        "state": ti["state"],
                        "try_number": ti["try_number"],
                        "completed_to_success_s": (
                            round(ended - completed, 3) if ended and completed else None
                        ),
                        "task_s": round(ended - _time(ti["start_date"]), 3)
                        if ended and ti.get("start_date")
                        else None,
                    }
                )
            _figures(rows, began)  # written after every wave: a run cut short still tells
            print(f"e2e_real_airflow: {len(rows)} of {TASKS} tasks ended", flush=True)
    finally:
        seen.stop()
        for namespace in namespaces:
            volcano_cluster.delete_namespace(namespace)
    figures = _figures(rows, began)
    print(f"e2e_real_airflow: {json.dumps(figures, indent=2)}")
    assert not figures["wrong"], figures["wrong"]
    assert len(rows) == TASKS


def _figures(rows: list[dict], began: float) -> dict:
    """The figures of the tasks ended so far, also written to ``FIGURES``."""
    figures: dict = {
        "tasks": len(rows),
        "planned": TASKS,
        "wave": WAVE,
        "defer_settle_seconds": SETTLE_S,
        "schedulers": 2,
        "triggerers": 2,
        "wall_s": round(time.monotonic() - began, 1),
        "wrong": [r for r in rows if (r["state"], r["try_number"]) != ("success", 1)][:5],
    }
    for kind, duration in KINDS.items():
        mine = [r for r in rows if r["kind"] == kind and r["state"] == "success"]
        figures[kind] = {
            "job_runs_s": duration,
            "completed_to_success_s": _summary(
                [r["completed_to_success_s"] for r in mine if r["completed_to_success_s"]]
            ),
            "task_s": _summary([r["task_s"] for r in mine if r["task_s"]]),
        }
    both = [r["completed_to_success_s"] for r in rows if r["completed_to_success_s"]]
    figures["all"] = {"completed_to_success_s": _summary(both)}
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    FIGURES.write_text(json.dumps({**figures, "runs": rows}, indent=2) + "\n")
    return figures

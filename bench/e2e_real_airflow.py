"""e2e_real_airflow (issue 26): job ``Completed`` to task success through the real scheduler
and triggerer of a production-shaped Airflow (PostgreSQL, two schedulers, two triggerers).

The driver is ``tests/reliability/test_e2e_real_airflow.py`` (marked ``long``), run as a program
(pytest in a child process, ``AVW_E2E_REAL_TASKS`` deferred tasks, on this cluster), as
``handover`` does: the benchmark imports nothing from ``tests/``. Half the tasks' jobs end at
once (``Completed`` while the trigger still waits out ``defer_settle_seconds``), half after the
settle, so the settle's cost shows apart. The figures come back through
``test-artifacts/reliability/e2e_real_airflow.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import REPO

TRIAL = (
    "tests/reliability/test_e2e_real_airflow.py"
    "::test_job_completed_to_task_success_through_the_real_scheduler_and_triggerer"
)
FIGURES = REPO / "test-artifacts" / "reliability" / "e2e_real_airflow.json"


def e2e_real_airflow(
    cluster_dir: Path, tasks: int, wave: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """Run the driver with ``tasks`` deferred tasks; its figures, and whether it passed."""
    FIGURES.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        AVW_E2E_REAL_TASKS=str(tasks),
        AVW_E2E_REAL_WAVE=str(wave),
        AVW_CLUSTER_STATE_DIR=str(cluster_dir.resolve()),
    )
    say(f"e2e_real_airflow: {tasks} deferred tasks through the real scheduler ({TRIAL})")
    argv = [sys.executable, "-m", "pytest", TRIAL, "-q", "-s", "-m", "long"]
    proc = subprocess.run([*argv, "-p", "no:cacheprovider"], cwd=REPO, env=env, check=False)
    if not FIGURES.exists():
        return {"tasks": tasks, "trial_passed": False, "error": f"pytest exited {proc.returncode}"}
    figures = json.loads(FIGURES.read_text())
    figures.pop("runs", None)  # per task: in test-artifacts, not in the report
    return {**figures, "trial_passed": proc.returncode == 0}


def _planned(e: dict) -> str:
    planned = e.get("planned", e["tasks"])
    return "" if planned == e["tasks"] else f" of {planned} planned (cut short)"


def _row(label: str, kind: dict) -> str:
    c, t = kind["completed_to_success_s"], kind["task_s"]
    return (
        f"| {label} | {kind['job_runs_s']:g} s | {c['p50']} s | {c['p99']} s | {t['p50']} s "
        f"| {c['n']} |"
    )


def md_e2e_real_airflow(r: dict) -> list[str]:
    e = r["e2e_real_airflow"]
    title = "## End to end through the real scheduler and triggerer"
    if "error" in e:
        return [title, "", f"The driver did not run: {e['error']}."]
    settle = e["defer_settle_seconds"]
    at_once, after = e["ends_at_once"], e["ends_after_settle"]
    cost = None
    if at_once["completed_to_success_s"]["p50"] and after["completed_to_success_s"]["p50"]:
        cost = round(
            at_once["completed_to_success_s"]["p50"] - after["completed_to_success_s"]["p50"], 2
        )
    return [
        title,
        "",
        f"{e['tasks']} deferred tasks{_planned(e)} (waves of {e['wave']}) on a "
        "production-shaped Airflow: "
        f"PostgreSQL, {e['schedulers']} schedulers (LocalExecutor), {e['triggerers']} "
        f"triggerers; `defer_settle_seconds` {settle:g} s. Job `Completed` (seen by a watch) to "
        "the task's `end_date`:",
        "",
        "| jobs that | job runs | Completed to success p50 | p99 | task p50 | n |",
        "|---|---|---|---|---|---|",
        _row("end at once (inside the settle)", at_once),
        _row("end after the settle", after),
        "",
        f"All: p50 {e['all']['completed_to_success_s']['p50']} s, p99 "
        f"{e['all']['completed_to_success_s']['p99']} s. The settle's cost at the median: "
        f"{cost} s. Wrong outcomes: {len(e['wrong'])}; run took {e['wall_s']} s "
        f"({'passed' if e['trial_passed'] else 'FAILED'}).",
    ]


def e2e_real_airflow_goals(e: dict | None) -> list[str]:
    if not e:
        return []
    if "error" in e:
        return [f"e2e_real_airflow: did not run ({e['error']})"]
    after = e["ends_after_settle"]["completed_to_success_s"]
    return [
        f"every deferred task of {e['tasks']} succeeded on its first try through the real "
        f"scheduler and triggerer: {'met' if not e['wrong'] and e['trial_passed'] else 'MISSED'}"
        f"; Completed to success after the settle p50 {after['p50']} s, p99 {after['p99']} s"
    ]

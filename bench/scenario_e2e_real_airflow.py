"""11. e2e_real_airflow (issue 26): job ``Completed`` to task success through the real
scheduler and triggerer of a production-shaped Airflow (PostgreSQL, two schedulers, two
triggerers), half the jobs ending inside ``defer_settle_seconds`` and half after, beside as many
of Airflow's own deferrable tasks (trigger fire to success; goal: the provider's median at
most 1.2x Airflow's resume on a worker). The driver is
``tests/reliability/test_e2e_real_airflow.py``, run as a program (``common.trial``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from common import say, table, trial

KEYS = ("e2e_real_airflow",)
NEEDS = "cluster"
OPTIONS = {
    "e2e_real_tasks": (50, 6, "deferred tasks through the real Airflow"),
    "e2e_real_wave": (10, 6, "tasks started together"),
}
TRIAL = (
    "tests/reliability/test_e2e_real_airflow.py"
    "::test_job_completed_to_task_success_through_the_real_scheduler_and_triggerer"
)
#: Airflow's processes import from bytecode, as an installed deployment's do: with a venv
#: installed without ``.pyc`` files (uv's default) and ``PYTHONDONTWRITEBYTECODE`` set (as on
#: this project's machines), every task process would compile Airflow's, ``kubernetes``' and
#: the provider's modules from source, about 6 s more per task process on 2 cores. The
#: bytecode goes to a cache of its own (``PYTHONPYCACHEPREFIX``), never into the venv.
PYCACHE = Path.home() / ".cache" / "airflow-volcano-wandb" / "pycache"


def run(ctx) -> dict:
    """Run the driver with ``--e2e-real-tasks`` deferred tasks; its figures, and whether it
    passed."""
    tasks, wave = ctx.e2e_real_tasks, ctx.e2e_real_wave
    env = {
        "AVW_E2E_REAL_TASKS": str(tasks),
        "AVW_E2E_REAL_WAVE": str(wave),
        "AVW_CLUSTER_STATE_DIR": str(ctx.cluster.state_dir),
        "PYTHONPYCACHEPREFIX": str(PYCACHE),
    }
    say(f"e2e_real_airflow: {tasks} deferred tasks through the real scheduler")
    # The scenario's own record of when and how loaded, whatever the report's merge keeps.
    measured = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 2),
        "bytecode": f"cached in {PYCACHE}",
    }
    args, drop = ("-s", "-m", "long"), ("PYTHONDONTWRITEBYTECODE",)
    figures, status = trial(TRIAL, "e2e_real_airflow.json", env, say, args, drop)
    if figures is None:
        error = f"pytest exited {status}"
        return {
            "e2e_real_airflow": {
                "tasks": tasks,
                "trial_passed": False,
                "error": error,
                "measured": measured,
            }
        }
    figures.pop("runs", None)  # per task: in test-artifacts, not in the report
    return {"e2e_real_airflow": {**figures, "trial_passed": status == 0, "measured": measured}}


def section(r: dict) -> list[str]:
    e = r["e2e_real_airflow"]
    if "error" in e:
        return [f"The driver did not run: {e['error']}."]
    planned, m = e.get("planned", e["tasks"]), e.get("measured")
    cut = "" if planned == e["tasks"] else f" of {planned} planned (cut short)"
    bytecode = f"; bytecode: {m['bytecode']}" if m and "bytecode" in m else ""
    measured = f"; measured {m['date']}, load average before {m['load_before']}" if m else ""
    at_once, after = (e[k]["completed_to_success_s"] for k in ("ends_at_once", "ends_after_settle"))
    cost = round(at_once["p50"] - after["p50"], 2) if at_once["p50"] and after["p50"] else None

    def row(label: str, kind: dict) -> list:
        c, t = kind["completed_to_success_s"], kind["task_s"]
        return [
            label,
            f"{kind['job_runs_s']:g} s",
            f"{c['p50']} s",
            f"{c['p99']} s",
            f"{t['p50']} s",
            c["n"],
        ]

    everything = e["all"]["completed_to_success_s"]
    return [
        f"{e['tasks']} deferred tasks{cut} (waves of {e['wave']}) on a production-shaped Airflow: "
        f"PostgreSQL, {e['schedulers']} schedulers (LocalExecutor), {e['triggerers']} "
        f"triggerers; `defer_settle_seconds` {e['defer_settle_seconds']:g} s{measured}{bytecode}. "
        "Job `Completed` (seen by a watch) to the task's `end_date`:",
        "",
        *table(
            "jobs that | job runs | Completed to success p50 | p99 | task p50 | n",
            row("end at once (inside the settle)", e["ends_at_once"]),
            row("end after the settle", e["ends_after_settle"]),
        ),
        "",
        f"All: p50 {everything['p50']} s, p99 {everything['p99']} s. The settle's cost at the "
        f"median: {cost} s. Wrong outcomes: {len(e['wrong'])}; run took {e['wall_s']} s "
        f"({'passed' if e['trial_passed'] else 'FAILED'}).",
        *md_floor(e),
    ]


#: The goal for the provider's trigger fire to success over Airflow's own resume on a worker.
FLOOR_RATIO_GOAL = 1.2
FAMILIES = (
    ("provider", "the provider's operator (resumes on a worker)"),
    ("airflow_resume_on_worker", "Airflow's `DateTimeTrigger`, resumes on a worker"),
    ("airflow_sensor_in_triggerer", "Airflow's `DateTimeSensorAsync`, ends in the triggerer"),
)
STEPS = (
    ("fired_to_scheduled_s", "fire to event written (`scheduled_when`)"),
    ("scheduled_to_queued_s", "to queued by a scheduler (`queued_when`)"),
    ("queued_to_process_s", "to the task process's first line (executor slot)"),
    ("dag_parse_s", "DAG file parsed (its imports)"),
    ("execute_complete_s", "`execute_complete`"),
    ("post_execute_s", "return value pushed, to `end_date`"),
)


def _p(figure: dict | None) -> str:
    return "" if not figure or figure.get("p50") is None else f"{figure['p50']} s"


def md_floor(e: dict) -> list[str]:
    """Trigger fire to success of the provider and of Airflow's own, and the steps between."""
    if not (f := e.get("trigger_fired_to_success")):
        return []
    fired = [(label, f[family]["fired_to_success_s"]) for family, label in FAMILIES]
    steps = [(f["provider"].get(k), f["airflow_resume_on_worker"].get(k), s) for k, s in STEPS]
    inside = f["provider"].get("execute_complete_steps_s") or {}
    return [
        "",
        "Trigger fired (the triggerer's `Trigger fired event` line) to the task's `end_date`, "
        "the provider's tasks beside as many of Airflow's own of each kind:",
        "",
        *table(
            "task | fired to success p50 | p99 | n",
            *((x, f"{c['p50']} s", f"{c['p99']} s", c["n"]) for x, c in fired),
        ),
        "",
        f"Provider median over Airflow's resume-on-worker median: "
        f"**{f['ratio_provider_to_resume_on_worker']}** (goal at most {FLOOR_RATIO_GOAL}).",
        "",
        *table(
            "step (medians) | provider | Airflow, resumed on a worker",
            *((s, _p(a), _p(b)) for a, b, s in steps),
        ),
        *(
            ["", "Inside the provider's `execute_complete` (medians, before each line):", ""]
            if inside
            else []
        ),
        *(f"- {v['before_it']}: {_p(v)}" for v in inside.values() if v.get("n")),
    ]


def goals(e: dict | None) -> list[str]:
    if not e:
        return []
    if "error" in e:
        return [f"e2e_real_airflow: did not run ({e['error']})"]
    after = e["ends_after_settle"]["completed_to_success_s"]
    ok = "met" if not e["wrong"] and e["trial_passed"] else "MISSED"
    goals = [
        f"every deferred task of {e['tasks']} succeeded on its first try through the real "
        f"scheduler and triggerer: {ok}; Completed to success after the settle p50 "
        f"{after['p50']} s, p99 {after['p99']} s"
    ]
    ratio = (e.get("trigger_fired_to_success") or {}).get("ratio_provider_to_resume_on_worker")
    if ratio is not None:
        met = "met" if ratio <= FLOOR_RATIO_GOAL else "MISSED"
        goals.append(
            f"trigger fired to success, provider median over Airflow's own resume-on-worker "
            f"median {ratio} (goal at most {FLOOR_RATIO_GOAL}): {met}"
        )
    return goals

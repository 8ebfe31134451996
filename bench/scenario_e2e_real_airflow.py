"""11. e2e_real_airflow (issues 26, 42): job or pod done to task success through the real
schedulers and triggerers of a production-shaped Airflow (PostgreSQL, two schedulers, two
triggerers), the provider's operator at its defaults (``defer_after``, ``defer_settle_seconds``)
beside ``KubernetesPodOperator(deferrable=True)`` with pods ending at the same moments
(``vs_kpo``; goal: the provider's median at most 0.6x KPO's, 0 tasks lost). Run once per
executor (issue 54): LocalExecutor (``e2e_real_airflow``), then CeleryExecutor, the Helm
chart's default, with two workers (``e2e_real_airflow_celery``), which adds what the window
costs there: worker slots held, and the resumed tasks' wait in the Celery queue. The driver
is ``tests/reliability/test_e2e_real_airflow.py``, run as a program (``common.trial``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from common import measured, say, table, trial

#: Each executor's key (``tests/e2e/executors.py``), in the order they run.
EXECUTOR_KEYS = {"local": "e2e_real_airflow", "celery": "e2e_real_airflow_celery"}
EXECUTOR_NAMES = {"local": "LocalExecutor", "celery": "CeleryExecutor"}
KEYS = tuple(EXECUTOR_KEYS.values())
NEEDS = "cluster"
OPTIONS = {
    "e2e_real_tasks": (50, 6, "the provider's tasks whose job ends at once"),
    "e2e_real_others": (10, 2, "tasks of each other kind and of KPO's"),
    "e2e_real_in_flight": (10, 6, "tasks unended at once"),
    "e2e_real_executors": ("local,celery", None, "the executors to run it on, in turn"),
}
TRIAL = (
    "tests/reliability/test_e2e_real_airflow.py"
    "::test_job_or_pod_done_to_task_success_through_the_real_scheduler_and_triggerer"
)
#: Airflow's processes import from bytecode, as an installed deployment's do: with a venv
#: installed without ``.pyc`` files (uv's default) and ``PYTHONDONTWRITEBYTECODE`` set (as on
#: this project's machines), every task process would compile Airflow's, ``kubernetes``' and
#: the provider's modules from source, about 6 s more per task process on 2 cores. The
#: bytecode goes to a cache of its own (``PYTHONPYCACHEPREFIX``), never into the venv.
PYCACHE = Path.home() / ".cache" / "airflow-volcano-wandb" / "pycache"
#: The issue's goals: the provider's job ending at once ends its task within this (p50).
AT_ONCE_GOAL_S = 2.0


def run(ctx) -> dict:
    """Run the driver on each executor asked for; their figures, and whether each passed."""
    figures = {}
    for executor in ctx.e2e_real_executors.split(","):
        if executor not in EXECUTOR_KEYS:
            raise ValueError(f"--e2e-real-executors: {executor!r} is not one of {EXECUTOR_KEYS}")
        figures[EXECUTOR_KEYS[executor]] = run_on(ctx, executor)
    return figures


def run_on(ctx, executor: str) -> dict:
    """The driver's figures on one executor's stack."""
    env = {
        "AVW_E2E_REAL_TASKS": str(ctx.e2e_real_tasks),
        "AVW_E2E_REAL_OTHERS": str(ctx.e2e_real_others),
        "AVW_E2E_REAL_IN_FLIGHT": str(ctx.e2e_real_in_flight),
        "AVW_CLUSTER_STATE_DIR": str(ctx.cluster.state_dir),
        "PYTHONPYCACHEPREFIX": str(PYCACHE),
        "EXECUTOR": executor,
    }
    say(f"e2e_real_airflow on {executor}: {ctx.e2e_real_tasks} short tasks and the others")
    # The scenario's own record of when and how loaded, whatever the report's merge keeps.
    measured = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "load_before": round(os.getloadavg()[0], 2),
        "bytecode": f"cached in {PYCACHE}",
    }
    args, drop = ("-s", "-m", "long"), ("PYTHONDONTWRITEBYTECODE",)
    figures, status = trial(TRIAL, "e2e_real_airflow.json", env, say, args, drop)
    measured["load_after"] = round(os.getloadavg()[0], 2)
    if figures is None:
        error = f"pytest exited {status}"
        result = {"tasks": ctx.e2e_real_tasks, "trial_passed": False, "error": error}
        return {**result, "executor": executor, "measured": measured}
    figures.pop("runs", None)  # per task: in test-artifacts, not in the report
    return {**figures, "trial_passed": status == 0, "measured": measured}


def _s(figure: dict | None, key: str = "p50") -> str:
    return "" if not figure or figure.get(key) is None else f"{figure[key]} s"


KIND_LABELS = {
    "ends_at_once": "end at once (inside the first window)",
    "ends_after_deferral": "end just after the deferral (inside the settle)",
    "ends_after_settle": "end long after the window and the settle",
}


def section(r: dict) -> list[str]:
    """Each executor's run, LocalExecutor's first."""
    lines: list[str] = []
    for executor, key in EXECUTOR_KEYS.items():
        if key in r:
            heading = f"**On {EXECUTOR_NAMES[executor]}** (`{key}`)."
            lines += [*([""] if lines else []), heading, "", *executor_section(r[key])]
    return lines


def _stack_words(e: dict) -> str:
    """The stack's executor and its task slots, in words."""
    if e.get("executor") == "celery":
        return (
            f"{e['schedulers']} schedulers, {e['celery_workers']} Celery workers "
            f"(CeleryExecutor, `worker_concurrency` {e['worker_concurrency']} each; Redis the "
            "broker)"
        )
    return (
        f"{e['schedulers']} schedulers (LocalExecutor, `parallelism` "
        f"{e['parallelism_per_scheduler']} each)"
    )


def executor_section(e: dict) -> list[str]:
    if "error" in e:
        return [f"The driver did not run: {e['error']}."]
    m = e.get("measured") or {}
    load = f"load average before {m.get('load_before')}, after {m.get('load_after')}"
    kinds = [k for k in KIND_LABELS if e.get(k, {}).get("n")]

    def row(kind: str) -> list:
        k = e[kind]
        c = k["completed_to_success_s"]
        skew = c.get("clock_skew")
        skewed = f"{skew['n']} (worst {skew['min']} s)" if skew else 0
        cells = [KIND_LABELS[kind], f"{k['job_runs_s']:g} s", k["deferred"], _s(c), _s(c, "p99")]
        return [*cells, skewed]

    planned = ", ".join(f"{n} {k}" for k, n in e["planned"].items())
    return [
        f"{sum(e['planned'].values())} tasks ({planned}), "
        f"at most {e['in_flight']} unended at once, on a production-shaped Airflow: PostgreSQL, "
        f"{_stack_words(e)}, {e['triggerers']} triggerers; `defer_after` "
        f"{e['defer_after']:g} s, `defer_settle_seconds` {e['defer_settle_seconds']:g} s "
        f"(the defaults); measured {m.get('date')}, {load}; bytecode {m.get('bytecode')}. "
        "The provider's tasks, job `Completed` (seen by a watch) to the task's `end_date`:",
        "",
        *table(
            "jobs that | job runs | deferred | Completed to success p50 | p99 | ended before the "
            "watch saw `Completed` (clock skew, not counted)",
            *map(row, kinds),
        ),
        "",
        f"Wrong outcomes of the provider: {len(e['wrong'])}; run took {e['wall_s']} s "
        f"({'passed' if e['trial_passed'] else 'FAILED'}).",
        *md_vs_kpo(e),
        *md_window_cost(e),
    ]


def md_window_cost(e: dict) -> list[str]:
    """The window's cost to the executor: slots held, and the resumed tasks' wait."""
    if not (w := e.get("window_cost")):
        return []
    held, wait = w["deferred_first_try_slot_s"], w["resumed_queue_wait_s"]
    return [
        "",
        f"The window's cost to the executor, the provider's tasks: a task slot held "
        f"{w['slot_s_per_task']} s per task on average (its first try's start to its deferral "
        f"or its end); a task that deferred held it {_s(held)} (p50, p99 {_s(held, 'p99')}, "
        f"n {held['n']}); a resumed task waited {_s(wait)} for a slot again (queued to its "
        f"process's first line, p50; p99 {_s(wait, 'p99')}, n {wait['n']}).",
    ]


FAMILIES = {"provider": "provider", "kpo": "KPO", "floor": "Airflow's own"}
STEPS = (
    ("done_to_fired_s", "done to the trigger's fire (its detection; the provider's settle)"),
    ("fired_to_scheduled_s", "the triggerer writes the event (`scheduled_when`)"),
    ("scheduled_to_queued_s", "a scheduler queues the task (`queued_when`)"),
    ("queued_to_process_s", "an executor slot, to the task process's first line"),
    ("dag_parse_s", "the DAG file parsed (its imports)"),
    ("execute_complete_s", "`execute_complete` (KPO: `trigger_reentry`)"),
    ("post_execute_s", "the return value pushed, to `end_date`"),
)


def md_vs_kpo(e: dict) -> list[str]:
    """Each operator's done to success, losses, first-try slot and resumed steps, by kind."""
    if not (v := e.get("vs_kpo")):
        return []
    groups = [(f"{FAMILIES[f]} `{k}`", g) for f in FAMILIES for k, g in v.get(f, {}).items()]
    resumed = [(label, g) for label, g in groups if g.get("steps")]
    ratios = ", ".join(f"{k} **{x}**" for k, x in v["ratio_provider_to_kpo"].items())
    floor = ", ".join(f"{k} **{x}**" for k, x in v.get("ratio_provider_to_floor", {}).items())
    less_wait = v.get("ratio_provider_to_kpo_less_slot_wait", {})
    less = ", ".join(f"{k} **{x}**" for k, x in less_wait.items())
    return [
        "",
        "Side by side with `KubernetesPodOperator(deferrable=True)` at its defaults "
        "(`tests/reliability/dags/avw_kpo_dags.py`), its pod ending at the same moments; done is "
        "the job `Completed` (provider) or the pod ended (KPO); Airflow's own: a deferral "
        "with its `DateTimeTrigger`, resumed on a worker whose `execute_complete` only returns "
        "(`avw_floor_dags.py`), done when the trigger fires; lost: not a success on the "
        "first try; the first try's worker slot: its start to its deferral or its end:",
        "",
        *table(
            "tasks whose job or pod | runs | done to success p50 | p99 | lost | deferred | "
            "first try's slot p50 | n",
            *(
                [
                    label,
                    f"{g['runs_s']:g} s",
                    _s(g["done_to_success_s"]),
                    _s(g["done_to_success_s"], "p99"),
                    g["lost"],
                    g["deferred"],
                    _s(g["first_try_slot_s"]),
                    g["n"],
                ]
                for label, g in groups
            ),
        ),
        "",
        f"The provider's median over KPO's: {ratios} (goal at most {v['ratio_goal']})"
        + (f"; over Airflow's own: {floor} (a figure)." if floor else "."),
        *(
            [
                "Less each resumed task's wait for an executor slot (the deployment's, met by "
                f"every family alike where its slots are crowded), over KPO's: {less}."
            ]
            if less
            else []
        ),
        *(["", "Tasks resumed after a deferral, medians:", ""] if resumed else []),
        *(
            table(
                "step | " + " | ".join(label for label, _ in resumed),
                *([s, *(_s(g["steps"].get(k)) for _, g in resumed)] for k, s in STEPS),
            )
            if resumed
            else []
        ),
    ]


def goals(e: dict | None) -> list[str]:
    if "error" in e:
        return [f"e2e_real_airflow: did not run ({e['error']})"]
    ok = "met" if not e["wrong"] and e["trial_passed"] else "MISSED"
    at_once = e["ends_at_once"]["completed_to_success_s"]["p50"]
    met = "met" if measured(at_once) <= AT_ONCE_GOAL_S else "MISSED"
    goals = [
        f"every task of the provider succeeded on its first try through the real schedulers and "
        f"triggerers ({e['tasks']} tasks): {ok}",
        f"a job ending at once ends its task within {AT_ONCE_GOAL_S:g} s of `Completed` (p50, "
        f"`defer_after` {e['defer_after']:g} s): {at_once} s, {met}",
    ]
    v = e["vs_kpo"]
    for kind, ratio in v["ratio_provider_to_kpo"].items():
        met = "met" if measured(ratio) <= v["ratio_goal"] else "MISSED"
        goals.append(
            f"provider median over `KubernetesPodOperator`'s, {kind}: {ratio} (goal at most "
            f"{v['ratio_goal']}): {met}"
        )
    goals.append(f"`KubernetesPodOperator` lost {v['lost']['kpo']} tasks (a figure)")
    return goals

"""The figures of ``e2e_real_airflow``'s rows (``test_support/e2e_real.py``): for the provider's
tasks of each kind, done to success and the worker slot the first try held; side by side with
``KubernetesPodOperator``'s and Airflow's own floor (``vs_kpo``), with the steps of the tasks
resumed after a deferral, and the tasks each lost."""

from __future__ import annotations

import math
import statistics
import time

from test_support.e2e_real import DEFER_AFTER, KINDS, PROVIDER_MARKS, SETTLE_S, STEPS, lost

#: The goal for the provider's median done to success over KPO's, each kind (issue 42).
RATIO_GOAL = 0.6
LESS_SLOT_WAIT = "done_to_success_less_slot_wait_s"


def percentile(values: list[float], q: float) -> float:
    """Nearest rank (as bench/common.py): with fewer than 100 values, p99 is the maximum."""
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


def summary(values: list[float | None]) -> dict:
    """Median, p99 and range of the values measured; a negative duration (the watch that
    stamped ``Completed`` lagged the task's own clock) is a clock-skew finding, counted apart
    (``clock_skew``) and not averaged in."""
    present = [v for v in values if v is not None]
    skewed = [v for v in present if v < 0]
    kept = [v for v in present if v >= 0]
    skew = {"clock_skew": {"n": len(skewed), "min": round(min(skewed), 2)}} if skewed else {}
    if not kept:
        return {"n": 0, "p50": None, "p99": None, **skew}
    return {
        "n": len(kept),
        "p50": round(statistics.median(kept), 2),
        "p99": round(percentile(kept, 99), 2),
        "min": round(min(kept), 2),
        "max": round(max(kept), 2),
        **skew,
    }


def _group(rows: list[dict]) -> dict:
    """One family's tasks of one kind: counts, done to success (of those that succeeded),
    the first try's slot, and the steps of those resumed after a deferral."""
    ok = [r for r in rows if r["state"] == "success"]
    figures = {
        "n": len(rows),
        "lost": sum(map(lost, rows)),
        "deferred": sum(r["deferred"] for r in rows),
        "done_to_success_s": summary([r["done_to_success_s"] for r in ok]),
        "pod_done_to_success_s": summary([r["pod_done_to_success_s"] for r in ok]),
        "first_try_slot_s": summary([r["first_try_slot_s"] for r in rows]),
    }
    if resumed := [r for r in ok if r["fired_to_success_s"] is not None]:
        figures["fired_to_success_s"] = summary([r["fired_to_success_s"] for r in resumed])
        figures[LESS_SLOT_WAIT] = summary([_less_slot_wait(r) for r in resumed])
        figures["steps"] = {name: summary([r.get(name) for r in resumed]) for *_, name in STEPS}
    if inside := [
        r["execute_complete_steps_s"] for r in resumed if "execute_complete_steps_s" in r
    ]:
        figures["execute_complete_steps_s"] = {
            name: {"before_it": what, **summary([steps.get(name) for steps in inside])}
            for name, _, what in PROVIDER_MARKS
        }
    return figures


def _less_slot_wait(row: dict) -> float | None:
    """Done to success less the wait for an executor slot, which every family's resumed tasks
    meet alike where slots are crowded: what the operator itself costs."""
    done, wait = row["done_to_success_s"], row.get("queued_to_process_s")
    return None if done is None or wait is None else done - wait


def _by_family(rows: list[dict]) -> dict:
    families: dict = {}
    for row in rows:
        families.setdefault(row["family"], {}).setdefault(row["kind"], []).append(row)
    return {
        family: {kind: {"runs_s": KINDS[kind], **_group(mine)} for kind, mine in kinds.items()}
        for family, kinds in families.items()
    }


def _ratios(families: dict, anchor: str, figure: str = "done_to_success_s") -> dict:
    """The provider's median ``figure`` over ``anchor``'s, each kind both have it for."""
    ratios = {}
    for kind, theirs in families.get(anchor, {}).items():
        mine = families.get("provider", {}).get(kind)
        a, b = ((g.get(figure) or {}).get("p50") if g else None for g in (mine, theirs))
        if figure in theirs and (mine is None or figure in mine):
            ratios[kind] = round(a / b, 2) if a and b else None
    return ratios


def window_cost(rows: list[dict]) -> dict:
    """What the provider's ``defer_after`` window costs the executor: the slot each first try
    held (its start to its deferral, or to its end for a job that ended inside the window),
    their sum per task, and the wait of the resumed tasks for a slot again (queued to the task
    process's first line: under CeleryExecutor, the Celery queue and a worker's fork)."""
    slots = [r["first_try_slot_s"] for r in rows if r["first_try_slot_s"] is not None]
    deferred = [r["first_try_slot_s"] for r in rows if r["deferred"]]
    return {
        "slot_s_per_task": round(sum(slots) / len(slots), 2) if slots else None,
        "deferred_first_try_slot_s": summary(deferred),
        "resumed_queue_wait_s": summary([r.get("queued_to_process_s") for r in rows]),
    }


def e2e_figures(
    rows: list[dict], began: float, planned: dict, in_flight: int, executor: str = "local"
) -> dict:
    """The figures of the tasks ended so far (``planned``: tasks per family and kind) on the
    stack's ``executor`` (``tests/e2e/executors.py``)."""
    provider = [r for r in rows if r["family"] == "provider"]
    figures: dict = {
        "tasks": len(provider),
        "planned": planned,
        "in_flight": in_flight,
        "defer_after": DEFER_AFTER,
        "defer_settle_seconds": SETTLE_S,
        "executor": executor,
        "schedulers": 2,
        "triggerers": 2,
        "parallelism_per_scheduler": 2,
        **({"celery_workers": 2, "worker_concurrency": 2} if executor == "celery" else {}),
        "window_cost": window_cost(provider),
        "wall_s": round(time.monotonic() - began, 1),
        "wrong": [r for r in rows if r["family"].startswith("provider") and lost(r)][:5],
    }
    for kind, runs in KINDS.items():
        mine = [r for r in provider if r["kind"] == kind]
        ok = [r for r in mine if r["state"] == "success"]
        figures[kind] = {
            "job_runs_s": runs,
            "n": len(mine),
            "deferred": sum(r["deferred"] for r in mine),
            "completed_to_success_s": summary([r["done_to_success_s"] for r in ok]),
            "task_s": summary([r["task_s"] for r in ok]),
        }
    ok = [r for r in provider if r["state"] == "success"]
    figures["all"] = {"completed_to_success_s": summary([r["done_to_success_s"] for r in ok])}
    families = _by_family(rows)
    figures["vs_kpo"] = {
        **families,
        "ratio_provider_to_kpo": _ratios(families, "kpo"),
        "ratio_provider_to_floor": _ratios(families, "floor"),
        "ratio_provider_to_kpo_less_slot_wait": _ratios(families, "kpo", LESS_SLOT_WAIT),
        "ratio_goal": RATIO_GOAL,
        "lost": {
            family: sum(g["lost"] for g in kinds.values()) for family, kinds in families.items()
        },
    }
    return figures

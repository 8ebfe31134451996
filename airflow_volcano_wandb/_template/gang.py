"""Keeping Volcano's gang sizes (``minAvailable``) consistent when replicas change.

``spec.minAvailable`` is how many pods must be schedulable together before any starts; a task's
``minAvailable`` is the same for one task. When the template's value equals the total, the
author meant "all of them", so it follows the new total. Any other value was chosen on purpose
and is kept, which is an error when it no longer fits.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb._template.errors import error_at


def replica_counts(tasks: list[dict[str, Any]]) -> list[int | None]:
    """Each task's replicas if it is already an int (validation reports the others)."""
    counts = [t.get("replicas") for t in tasks]
    return [n if type(n) is int and n >= 0 else None for n in counts]


def _follow(min_available: Any, before: int | None, after: int | None) -> Any:
    is_gang_of_all = type(min_available) is int and min_available == before
    if is_gang_of_all and after is not None and after != before:
        return after
    return min_available


def rescale(job: dict[str, Any], tasks: list[dict[str, Any]], before: list[int | None]) -> None:
    """Scale gang-of-all ``minAvailable`` values to the new replica counts, in place."""
    after = replica_counts(tasks)
    for i, task in enumerate(tasks):
        if "minAvailable" in task:
            task["minAvailable"] = _follow(task["minAvailable"], before[i], after[i])
            # Only a change made by this run is reported here, with its cause; a template that
            # is inconsistent on its own is reported by validation with everything else.
            if (
                type(task["minAvailable"]) is int
                and after[i] is not None
                and after[i] != before[i]
                and task["minAvailable"] > after[i]
            ):
                raise error_at(
                    ("spec", "tasks", i, "minAvailable"),
                    f"is {task['minAvailable']} but task {task['name']!r} now has {after[i]} "
                    "replicas; lower minAvailable in the template or raise replicas",
                )
    spec = job["spec"]
    if "minAvailable" in spec and None not in before and None not in after:
        old_total, new_total = sum(before), sum(after)  # type: ignore[arg-type]
        spec["minAvailable"] = _follow(spec["minAvailable"], old_total, new_total)
        if (
            type(spec["minAvailable"]) is int
            and new_total != old_total
            and spec["minAvailable"] > new_total
        ):
            raise error_at(
                ("spec", "minAvailable"),
                f"is {spec['minAvailable']} but the job now has {new_total} replicas in total; "
                "lower minAvailable in the template or raise replicas",
            )

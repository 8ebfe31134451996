"""Keeping Volcano's gang sizes (``minAvailable``) consistent when replicas change.

``spec.minAvailable`` is how many pods must be schedulable together before any starts; a task's
``minAvailable`` is the same for one task. When the template's value equals the total, the
author meant "all of them", so it follows the new total. Any other value was chosen on purpose
and is kept, which is an error when it no longer fits.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.template.errors import error_at
from airflow_volcano_wandb.template.volcano import plugin_roles

#: ``gang=`` values: every DDP rank scheduled together, or the template's own minAvailable.
GANG_MODES = ("all_ranks", "template")


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
            replicas = after[i]  # a local, so that mypy narrows it
            # Only a change made by this run is reported here, with its cause; a template that
            # is inconsistent on its own is reported by validation with everything else.
            if (
                type(task["minAvailable"]) is int
                and replicas is not None
                and replicas != before[i]
                and task["minAvailable"] > replicas
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


def world_size(job: dict[str, Any], tasks: list[dict[str, Any]]) -> int | None:
    """The ranks the ``pytorch`` plugin counts in ``WORLD_SIZE`` (its master and worker
    tasks' replicas), or ``None`` when the job does not use the plugin."""
    plugins = job["spec"].get("plugins")
    arguments = plugins.get("pytorch") if isinstance(plugins, dict) else None
    if not isinstance(arguments, list):
        return None
    roles, _ = plugin_roles(arguments)
    counts = dict(zip([t.get("name") for t in tasks], replica_counts(tasks), strict=True))
    ranked = [counts.get(task) for task in {roles["master"], roles["worker"]} if task in counts]
    if any(n is None for n in ranked):
        return None  # validation reports the replicas
    return sum(ranked)  # type: ignore[arg-type]


def gang_all_ranks(job: dict[str, Any], tasks: list[dict[str, Any]]) -> None:
    """Raise ``spec.minAvailable`` to the world size of a PyTorch job, in place.

    DDP with a static world size makes progress only when every rank runs: with a smaller
    gang (the seed's ``minAvailable: 1``) Volcano starts the master alone, which then holds
    its GPUs in ``init_process_group`` waiting for workers that may never be placed.
    """
    ranks = world_size(job, tasks)
    current = job["spec"].get("minAvailable")
    if ranks and (type(current) is not int or current < ranks):
        job["spec"]["minAvailable"] = ranks

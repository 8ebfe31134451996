"""Keeping Volcano's gang sizes (``minAvailable``) consistent when replicas change.

``spec.minAvailable`` is how many pods must be schedulable together before any starts; a task's
``minAvailable`` is the same for one task. When the template's value equals the total, the
author meant "all of them", so it follows the new total. Any other value was chosen on purpose
and is kept, which is an error when it no longer fits.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.template.errors import Path, error_at
from airflow_volcano_wandb.template.volcano import pytorch_roles

#: ``gang=`` values: every DDP rank scheduled together, or the template's own minAvailable.
GANG_MODES = ("all_ranks", "template")


def replica_counts(tasks: list[dict[str, Any]]) -> list[int | None]:
    """Each task's replicas if it is already an int (validation reports the others)."""
    counts = [t.get("replicas") for t in tasks]
    return [n if type(n) is int and n >= 0 else None for n in counts]


def _follow(
    node: dict[str, Any], path: Path, before: int | None, after: int | None, now: str
) -> None:
    """Scale ``node``'s gang-of-all ``minAvailable`` (one equal to ``before``) to ``after``
    replicas, in place; ``now`` says what has them, for the error when a value chosen on
    purpose no longer fits."""
    min_available = node.get("minAvailable")
    if type(min_available) is not int or after is None or after == before:
        return
    if min_available == before:
        node["minAvailable"] = after
    # Only a change made by this run is reported here, with its cause; a template that is
    # inconsistent on its own is reported by validation with everything else.
    elif min_available > after:
        raise error_at(
            (*path, "minAvailable"),
            f"is {min_available} but {now}; lower minAvailable in the template or raise replicas",
        )


def rescale(job: dict[str, Any], tasks: list[dict[str, Any]], before: list[int | None]) -> None:
    """Scale gang-of-all ``minAvailable`` values to the new replica counts, in place."""
    after = replica_counts(tasks)
    for i, task in enumerate(tasks):
        now = f"task {task['name']!r} now has {after[i]} replicas"
        _follow(task, ("spec", "tasks", i), before[i], after[i], now)
    if None not in before and None not in after:
        total = sum(after)  # type: ignore[arg-type]
        now = f"the job now has {total} replicas in total"
        _follow(job["spec"], ("spec",), sum(before), total, now)  # type: ignore[arg-type]


def world_size(job: dict[str, Any], tasks: list[dict[str, Any]]) -> int | None:
    """The ranks the ``pytorch`` plugin counts in ``WORLD_SIZE`` (its master and worker
    tasks' replicas), or ``None`` when the job does not use the plugin."""
    found = pytorch_roles(job)
    if found is None:
        return None
    roles = found[0]
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

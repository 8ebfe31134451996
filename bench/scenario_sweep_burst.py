"""7. A sweep's burst: mapped task instances of the operator submit at once, then again as
retries (``sweep_burst.py``, in a child process): submit p50/p99, duplicates, 429s; then
their wait by the provider's trigger and by 2 s polling."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from common import PY, REPO, Cluster, parse_metrics, percentile, say
from waiters import background, waiter_row

from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR, MAP_INDEX_LABEL


def status_count(text: str, code: str) -> float:
    """Every request the apiserver answered with ``code``, from /metrics."""
    return sum(
        value
        for _, labels, value in parse_metrics(text, {"apiserver_request_total"})
        if labels.get("code") == code
    )


def sweep_burst(cluster: Cluster, env: dict, work: Path, tasks: int, window: float) -> dict:
    """``tasks`` mapped task instances submit at once (``bench/sweep_burst.py``), then submit
    again as retries; then their wait, by the provider's trigger and by 2 s polling."""
    namespace = cluster.create_namespace("bench-sweep")
    out = work / "sweep-burst.json"
    throttled = status_count(cluster.metrics(), "429")
    say(f"sweep: {tasks} mapped tasks submit at once in {namespace}, then again as retries")
    subprocess.run(
        [
            PY,
            str(REPO / "bench" / "sweep_burst.py"),
            "--namespace",
            namespace,
            "--tasks",
            str(tasks),
            "--out",
            str(out),
        ],
        env=env,
        check=True,
    )
    http_429 = status_count(cluster.metrics(), "429") - throttled
    burst = json.loads(out.read_text())
    errors = [r["error"] for r in burst["first"] + burst["again"] if "error" in r]
    jobs = cluster.list_jobs(namespace, MANAGED_SELECTOR)
    per_index: dict[str, int] = {}
    for job in jobs:
        index = job["metadata"]["labels"][MAP_INDEX_LABEL]
        per_index[index] = per_index.get(index, 0) + 1
    reattached = sum(
        1
        for a, b in zip(burst["first"], burst["again"], strict=True)
        if a.get("uid") == b.get("uid")
    )
    names_file = work / "sweep-jobs.json"
    names_file.write_text(
        json.dumps([{"name": r["name"], "uid": r["uid"]} for r in burst["first"] if "uid" in r])
    )
    idle = background(cluster, "sweep")
    waits = [
        waiter_row(cluster, env, work, namespace, names_file, tasks, how, window, idle, "sweep")
        for how in (("provider", "watch", 0), ("poll_2s", "poll", 2))
    ]
    cluster.delete_namespace(namespace)
    submit = [r["submit_s"] for r in burst["first"] if "submit_s" in r]
    retry = [r["submit_s"] for r in burst["again"] if "submit_s" in r]
    return {
        "tasks": tasks,
        "submit_p50_s": round(percentile(submit, 50), 3),
        "submit_p99_s": round(percentile(submit, 99), 3),
        "retry_p50_s": round(percentile(retry, 50), 3),
        "jobs": len(jobs),
        "duplicates": sum(n - 1 for n in per_index.values()),
        "map_indexes_without_a_job": tasks - len(per_index),
        "retries_reattached": reattached,
        "errors": errors[:5],
        "http_429": round(http_429),
        "watch_connections": waits[0]["watch_connections"],
        "wait": waits,
    }


def md_sweep(r: dict) -> list[str]:
    b = r["sweep_burst"]
    rows = [
        f"| {w['waiter']} | {w['watch_connections']} | {w['requests_per_min']:,.0f} | "
        f"{w['cpu_s_per_min']:.2f} |"
        for w in b["wait"]
    ]
    return [
        "## 7. A sweep's burst",
        "",
        f"{b['tasks']} mapped task instances run `execute()` at once (threads of one process), "
        "then again as retries of the same try.",
        "",
        "| tasks | submit p50 | submit p99 | retry p50 | jobs | duplicates | retries reattached "
        "| HTTP 429 | errors |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {b['tasks']} | {b['submit_p50_s']} s | {b['submit_p99_s']} s | {b['retry_p50_s']} s "
        f"| {b['jobs']} | {b['duplicates']} | {b['retries_reattached']} | {b['http_429']} | "
        f"{len(b['errors'])} |",
        "",
        "Then the wait on those jobs, in one waiter process each:",
        "",
        "| waiter | watch connections | requests/min | CPU s/min |",
        "|---|---|---|---|",
        *rows,
    ]

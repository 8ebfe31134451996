"""5. A crowded namespace: one triggerer's waiting triggers among many other owners' jobs in
one namespace: RSS growth, watch connections, the first (paginated, label-selected) LIST."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from common import (
    Cluster,
    api_counters,
    job_api_counters,
    managed_job,
    other_owner_job,
    rates,
    say,
)
from waiters import driver

from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR
from test_support.faults import start_component, stop_component


def background_job_watches(cluster: Cluster) -> float:
    """Watches on Volcano jobs the control plane holds now (the metrics do not say whose)."""
    return job_api_counters(cluster.metrics())["watches"]


def fill_namespace(cluster: Cluster, namespace: str, others: int, waiting: int) -> dict:
    """``others`` jobs of other owners (nine in ten marked Completed) and ``waiting`` of ours.

    Runs while vc-controller-manager is stopped (see ``namespace_scale``). Returns the
    waiting jobs as the operator knows them after submitting: name and uid.
    """
    t = time.monotonic()
    other_names = [f"other-{i:05d}" for i in range(others)]
    cluster.create_jobs(namespace, [other_owner_job(n) for n in other_names])
    finished = other_names[: others * 9 // 10]
    cluster.set_job_phases(namespace, dict.fromkeys(finished, "Completed"))
    ours = [f"wait-{i:04d}" for i in range(waiting)]
    cluster.create_jobs(
        namespace, [managed_job(n, 7200, run_id=namespace, index=i) for i, n in enumerate(ours)]
    )
    created = cluster.list_jobs(namespace, MANAGED_SELECTOR)
    say(f"namespace: {others} + {waiting} jobs in {time.monotonic() - t:.0f} s")
    return {
        "jobs": [{"name": j["metadata"]["name"], "uid": j["metadata"]["uid"]} for j in created],
        "created_s": round(time.monotonic() - t, 1),
        "finished_others": len(finished),
    }


def scale_window(proc: subprocess.Popen, cluster: Cluster) -> dict[str, dict]:
    """Read the driver's output, scraping the apiserver's job counters (and, under ``"all"``,
    every verb and resource, with the time) at its window marks."""
    marks: dict[str, dict] = {}
    for line in proc.stdout:
        for mark, prefix in (("start", "WINDOW_START"), ("end", "WINDOW_END")):
            if line.startswith(prefix):
                text = cluster.metrics()
                marks[mark] = job_api_counters(text)
                marks[mark]["all"] = api_counters(text)
                marks[mark]["t"] = time.monotonic()
    return marks


def namespace_scale(
    cluster: Cluster, env: dict, work: Path, others: int, waiting: int, window: float
) -> dict:
    """One triggerer, ``waiting`` triggers, in a namespace crowded with other owners' jobs.

    What is measured is the triggerer's side: its RSS, its watch connections and how long
    its first (label-selected, paginated) LIST takes while the apiserver filters the whole
    namespace. The Volcano controller's work on the jobs plays no part in that, and running
    ``others`` jobs would swamp a laptop, so the controller is stopped while the namespace
    fills and is measured: the jobs are real Volcano Jobs (admitted by Volcano's webhooks),
    the finished ones get their ``Completed`` phase through the status subresource, and the
    waiting ones never start (they stay without a phase, which a trigger waits on forever).
    """
    namespace = cluster.create_namespace("bench-ns")
    argv = stop_component(cluster.state_dir, "vc-controller-manager")
    try:
        filled = fill_namespace(cluster, namespace, others, waiting)
        jobs_file = work / "namespace-jobs.json"
        jobs_file.write_text(json.dumps(filled["jobs"]))
        idle_watches = background_job_watches(cluster)
        idle_all = api_counters(cluster.metrics())["watches"]
        out = work / "namespace-scale.json"
        say(f"namespace: {waiting} triggers in one TriggerRunner, {others} other jobs beside")
        proc = driver(
            "scale", "operator", 0, namespace, jobs_file, out, env,
            port=cluster.port, settle=10, window=window,
        )  # fmt: skip
        marks = scale_window(proc, cluster)
        proc.wait(120)
    finally:
        # Gone before the controller is back, or it would start on the waiting jobs.
        cluster.delete_namespace(namespace)
        cluster.wait_namespace_gone(namespace, timeout=300)
        start_component(cluster.state_dir, "vc-controller-manager", argv)
    result = json.loads(out.read_text())
    watches = max(marks["start"]["watches"], marks["end"]["watches"]) - idle_watches
    start, end = marks["start"]["all"], marks["end"]["all"]
    minutes = (marks["end"]["t"] - marks["start"]["t"]) / 60
    by_resource = {
        r: round(max(start["watches"].get(r, 0), n) - idle_all.get(r, 0))
        for r, n in end["watches"].items()
    }
    return {
        "trigger": "operator defaults (its jobs never start here: no pods)",
        "pod_watch_connections": by_resource.get("pods", 0),
        # Not less a background: the controller is stopped; the scheduler and KWOK remain.
        "by_verb_resource": {
            k: round(v, 1)
            for k, v in sorted(rates(start["requests"], end["requests"], minutes).items())
            if v >= 0.5
        },
        "jobs_in_namespace": others + waiting,
        "waiting": len(filled["jobs"]),
        "rss_growth_mb": round(result["rss_mb"] - result["rss_before_mb"], 1),
        "watch_connections": round(watches),
        "first_sync_s": round(result["first_sync_s"], 2) if result["first_sync_s"] else None,
        "rss_mb": round(result["rss_mb"], 1),
        "shared_watchers": result["shared_watchers"],
        "tcp_connections_max": result["tcp_connections_max"],
        "list_pages": sum(1 for _, verb in result["api_calls"] if verb == "list"),
        "client_requests_per_min": round(result["client_requests_per_min"], 1),
        "finished_others": filled["finished_others"],
        "jobs_created_s": filled["created_s"],
        "window_s": round(result["window_s"], 1),
        "fired_early": result["fired_early"],
    }


def md_namespace(r: dict) -> list[str]:
    n = r["namespace_scale"]
    return [
        "## 5. A crowded namespace (one triggerer)",
        "",
        f"{n['waiting']} triggers wait on jobs of ours in a namespace of "
        f"{n['jobs_in_namespace']} Volcano jobs ({n['finished_others']} of the others' "
        "marked Completed), all in one TriggerRunner:",
        "",
        "| waiting | jobs in namespace | RSS growth MB | watch connections | first sync s | "
        "LIST pages | client requests/min |",
        "|---|---|---|---|---|---|---|",
        f"| {n['waiting']} | {n['jobs_in_namespace']} | {n['rss_growth_mb']} | "
        f"{n['watch_connections']} | {n['first_sync_s']} | {n['list_pages']} | "
        f"{n['client_requests_per_min']} |",
        "",
        "RSS growth is over the same process idle (Airflow and the provider imported); watch "
        "connections from the apiserver's `apiserver_longrunning_requests` minus the "
        "background's; first sync is from the triggers' creation to the shared watch's "
        "complete label-selected, paginated LIST. vc-controller-manager was stopped while "
        "the namespace was filled and measured (the jobs are admitted by Volcano's webhooks; "
        "the finished ones got their phase through the status subresource; ours never "
        f"start). Filling it took {n['jobs_created_s']} s."
        + (
            f" The triggers were the operator's at its defaults; pod watches: "
            f"{n['pod_watch_connections']}; requests in the window by verb and resource "
            f"(not less a background): {n['by_verb_resource'] or 'none'}."
            if "trigger" in n
            else " (Earlier run: the bare trigger, without the restart budget.)"
        ),
    ]


def namespace_goals(n: dict | None) -> list[str]:
    if not n:
        return []
    size = f"{n['waiting']} waiting among {n['jobs_in_namespace']} jobs"
    return [
        f"RSS growth < 50 MB with {size}: "
        f"{'met' if n['rss_growth_mb'] < 50 else 'MISSED'} (+{n['rss_growth_mb']} MB)",
        f"1 watch connection with {size}: "
        f"{'met' if n['watch_connections'] == 1 else 'CHECK'} ({n['watch_connections']}); "
        f"first sync {n['first_sync_s']} s",
    ]

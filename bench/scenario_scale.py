"""2. Triggerer scale: N triggers in one event loop driven by Airflow's TriggerRunner, the
provider vs 2 s polling: watch connections and requests per minute from the apiserver's
/metrics, CPU and RSS of that process."""

from __future__ import annotations

import json
import time
from pathlib import Path

from common import Cluster, managed_job, say
from waiters import background, waiter_row


def triggerer_scale(
    cluster: Cluster, env: dict, work: Path, sizes: list[int], window: float
) -> dict:
    top = max(sizes)
    namespace = cluster.create_namespace("bench-scale")
    names = [f"scale-{i:04d}" for i in range(top)]
    names_file = work / "scale-names.json"
    names_file.write_text(json.dumps(names))
    say(f"scale: creating {top} jobs in {namespace} (running for 2 h)")
    t = time.monotonic()
    cluster.create_jobs(
        namespace, [managed_job(n, 7200, run_id=namespace, index=i) for i, n in enumerate(names)]
    )
    created_s = time.monotonic() - t
    cluster.wait_phase(namespace, top, {"Running"}, timeout=600, say=say)
    running_s = time.monotonic() - t
    say(f"scale: {top} jobs created in {created_s:.0f}s, all Running after {running_s:.0f}s")

    idle_rate, idle_watches = background(cluster, "scale")

    rows = []
    for jobs in sizes:
        for waiter, mode, interval in (("provider", "watch", 0), ("poll_2s", "poll", 2)):
            row = waiter_row(
                cluster,
                env,
                work,
                namespace,
                names_file,
                jobs,
                (waiter, mode, interval),
                window,
                (idle_rate, idle_watches),
                tag="scale",
            )
            rows.append(row)
    cluster.delete_namespace(namespace)
    return {
        "rows": rows,
        "background_reads_per_min": round(idle_rate, 1),
        "jobs_created_s": round(created_s, 1),
        "jobs_running_s": round(running_s, 1),
    }


def md_scale(r: dict) -> list[str]:
    lines = [
        "## 2. Triggerer scale (one process, one event loop)",
        "",
        "| waiter | jobs | watch connections | API requests/min | (client-side) | "
        "CPU s/min | RSS MB | RSS growth MB | TCP conns (max) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in r["triggerer_scale"]:
        expected = (
            f" of {row['expected_requests_per_min']} expected"
            if row["expected_requests_per_min"]
            else ""
        )
        lines.append(
            f"| {row['waiter']} | {row['jobs']} | {row['watch_connections']} | "
            f"{row['requests_per_min']}{expected} | {row['client_requests_per_min']} | "
            f"{row['cpu_s_per_min']} | {row['rss_mb']} | {row['rss_growth_mb']} | "
            f"{row['tcp_connections_max']} |"
        )
    scale = r["scale_meta"]
    lines += [
        "",
        f"Requests/min are job reads (GET/LIST/WATCH on jobs.batch.volcano.sh) from the "
        f"apiserver's `apiserver_request_total`, minus the control plane's own background "
        f"({scale['background_reads_per_min']}/min, measured idle just before); watch "
        "connections from `apiserver_longrunning_requests` minus the background's. "
        f"{max(s['jobs'] for s in r['triggerer_scale'])} jobs were created in "
        f"{scale['jobs_created_s']} s and all Running after {scale['jobs_running_s']} s.",
    ]
    return lines


def scale_goals(rows: list[dict] | None) -> list[str]:
    prov = [x for x in rows or [] if x["waiter"] == "provider"]
    if not prov:
        return []
    conns = {x["watch_connections"] for x in prov}
    rates = [x["requests_per_min"] for x in prov]
    top = max(prov, key=lambda x: x["jobs"])
    met = "met" if top["rss_growth_mb"] < 50 else "MISSED"
    return [
        f"O(1) watch connections per namespace: {'met' if conns == {1} else 'CHECK'} "
        f"({sorted(conns)} at N={[x['jobs'] for x in prov]})",
        f"requests/min independent of N: provider {rates} at N={[x['jobs'] for x in prov]}",
        f"RSS growth < 50 MB at {top['jobs']} jobs: {met} (+{top['rss_growth_mb']} MB)",
    ]

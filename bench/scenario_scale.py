"""2. Triggerer scale: N triggers in one TriggerRunner over N running jobs of 3 pods, the
provider's trigger at the operator's defaults (with its pod watch, and with per-job pod
reads) vs 2 s polling: the apiserver's requests and watches by resource, CPU and RSS."""

from __future__ import annotations

import json
import os

from common import NotMeasured, managed_job, say, table
from waiters import background, largest, waiter_resource, waiter_row, with_band

KEYS = ("triggerer_scale", "scale_meta")
NEEDS = "db"
#: The setting that turns the provider's pod watch off in a triggerer (``[volcano_wandb]
#: pod_watch``, default on): its triggers then LIST each running job's pods themselves.
POD_WATCH_ENV = "AIRFLOW__VOLCANO_WANDB__POD_WATCH"
#: Pods per job: a master and two workers, the seed template's gang.
WORKERS = 2

#: waiter -> (trigger_driver mode, poll interval, the triggerer's pod_watch: None = default).
WAITERS = {
    "provider": ("operator", 0, None),
    "provider_per_job_pod_reads": ("operator", 0, "False"),
    "poll_2s": ("poll", 2, None),
    # The earlier runs' trigger (no restart or startup budget: it reads no pods), for contrast.
    "provider_budget_off": ("watch", 0, None),
}
DEFAULT_WAITERS = ("provider", "provider_per_job_pod_reads", "poll_2s")
OPTIONS = {
    "sizes": ("100,500,1000", "20,50", "triggerer scale N values"),
    "scale_waiters": (",".join(DEFAULT_WAITERS), None, f"of {sorted(WAITERS)}"),
}


def pods(o) -> int:
    """The scale's jobs of 3 pods, beside the latency's (they may not be gone yet)."""
    return 3 * max(map(int, o.sizes.split(","))) + (o.latency_jobs if "latency" in o.only else 0)


def waiter_env(env: dict, pod_watch: str | None) -> dict:
    """The environment with ``[volcano_wandb] pod_watch`` set (``None``: the default)."""
    out = {k: v for k, v in env.items() if k != POD_WATCH_ENV}
    return out if pod_watch is None else {**out, POD_WATCH_ENV: pod_watch}


def start_running(cluster, namespace: str, names: list[str]) -> dict:
    """Jobs of ours of these names, each a master and ``WORKERS`` workers running for 2 h,
    all Running (``Cluster.start_jobs``)."""
    bodies = [
        managed_job(n, 7200, run_id=namespace, index=i, workers=WORKERS)
        for i, n in enumerate(names)
    ]
    return cluster.start_jobs(namespace, bodies, timeout=1200)


def run(ctx) -> dict:
    cluster, sizes = ctx.cluster, [int(s) for s in ctx.sizes.split(",")]
    top = max(sizes)
    namespace = cluster.create_namespace("bench-scale")
    names = [f"scale-{i:04d}" for i in range(top)]
    say(f"scale: creating {top} jobs of {1 + WORKERS} pods in {namespace} (running for 2 h)")
    started = start_running(cluster, namespace, names)
    created_s, running_s, pods = started["created_s"], started["running_s"], started["pods"]
    say(f"scale: {top} jobs created in {created_s:.0f}s, all Running after {running_s:.0f}s")
    say(f"scale: {pods} pods Running")
    names_file = ctx.work / "scale-jobs.json"
    names_file.write_text(json.dumps(started["jobs"]))
    idle = background(cluster, "scale")
    rows = []
    for jobs in sizes:
        for waiter in ctx.scale_waiters.split(","):
            mode, interval, pod_watch = WAITERS[waiter]
            how = (waiter, mode, interval, waiter_env(ctx.env, pod_watch))
            rows.append(waiter_row(ctx, namespace, names_file, jobs, how, idle, "scale"))
    cluster.delete_namespace(namespace)
    ours = {k: v for k, v in idle[2]["rates"].items() if waiter_resource(k)}
    meta = {"background_reads_per_min": round(idle[0], 1)}
    meta["background_by_verb_resource"] = {
        k: round(v, 1) for k, v in sorted(ours.items()) if abs(v) >= 0.5
    }
    # What else the control plane asked for in the background minute (it is subtracted from
    # every row's ``other_requests_per_min``).
    others = {k: v for k, v in idle[2]["rates"].items() if k not in ours}
    meta |= {"background_other_largest": largest(others), "jobs_created_s": round(created_s, 1)}
    meta |= {"jobs_running_s": round(running_s, 1), "pods_per_job": 1 + WORKERS}
    meta |= {"pods_running": pods, "window_s": ctx.window}
    meta["trigger"] = "operator defaults (bench/trigger_driver.py operator_default_kwargs)"
    meta["pod_check_interval_env"] = os.environ.get("AIRFLOW__VOLCANO_WANDB__POD_CHECK_INTERVAL")
    return {"triggerer_scale": rows, "scale_meta": meta}


COLUMNS = ("waiter", "jobs", "watch_connections", "pod_watch_connections")
COLUMNS += ("waiter_requests_per_min", "client_requests_per_min", "cpu_s_per_min", "rss_mb")
COLUMNS += ("rss_growth_mb", "tcp_connections_max")


def section(r: dict) -> list[str]:
    scale, rows = r["scale_meta"], r["triggerer_scale"]

    def cells(x: dict) -> list:
        expected = f" of {n} expected" if (n := x.get("expected_requests_per_min")) else ""
        rate = with_band(x["waiter_requests_per_min"], x["waiter_requests_band_per_min"])
        return [f"{rate}{expected}" if k.startswith("waiter_") else x[k] for k in COLUMNS]

    def breakdown(row: dict) -> str:
        return ", ".join(f"{k} {v:g}" for k, v in row["by_verb_resource"].items()) or "none"

    return [
        f"N running jobs of {scale['pods_per_job']} pod(s) each; the provider's triggers as the "
        "operator defers them by default (restart budget 3, startup budget 120 s, pods checked "
        "every `pod_check_interval`).",
        "",
        *table(
            "waiter | jobs | job watches | pod watches | requests/min on jobs+pods | "
            "(client-side) | CPU s/min | RSS MB | RSS growth MB | TCP conns (max)",
            *map(cells, rows),
        ),
        "",
        "Requests per minute by verb and resource (the apiserver's, less the background):",
        "",
        *table(
            "waiter | jobs | by verb and resource",
            *((x["waiter"], x["jobs"], breakdown(x)) for x in rows),
        ),
        "",
        "Requests/min are the apiserver's `apiserver_request_total` over the window (by verb and "
        "resource; jobs+pods sums every verb on Volcano jobs and pods), less the control "
        "plane's own on them, measured idle for a minute just before with every job running "
        f"({scale['background_by_verb_resource']}/min), never clamped at zero; ± is that "
        "background's noise (its two halves' difference, at least one request in the window); "
        "watches from "
        "`apiserver_longrunning_requests` less the background's. "
        f"{max(x['jobs'] for x in rows)} jobs were created in {scale['jobs_created_s']} s and "
        f"all Running after {scale['jobs_running_s']} s ({scale['pods_running']} pods Running).",
    ]


def goals(rows: list[dict] | None) -> list[str]:
    prov = [x for x in rows if x["waiter"] == "provider"]
    if not prov:
        raise NotMeasured("no row of the provider")
    sizes = [x["jobs"] for x in prov]
    top = max(prov, key=lambda x: x["jobs"])
    rates = [
        with_band(x["waiter_requests_per_min"], x["waiter_requests_band_per_min"]) for x in prov
    ]
    watches = [(x["watch_connections"], x["pod_watch_connections"]) for x in prov]
    return [
        f"requests/min flat in N, under 10 a minute at {top['jobs']} running jobs: "
        f"{'met' if top['waiter_requests_per_min'] < 10 else 'MISSED'} "
        f"(provider {', '.join(rates)} on jobs+pods at N={sizes}; rate ± the background's noise)",
        f"one job watch and one pod watch per namespace: "
        f"{'met' if set(watches) == {(1, 1)} else 'MISSED'} "
        f"((job, pod) watches {watches} at N={sizes})",
        f"triggerer RSS growth < 80 MB at {top['jobs']} running jobs of 3 pods: "
        f"{'met' if top['rss_growth_mb'] < 80 else 'MISSED'} (+{top['rss_growth_mb']} MB)",
    ]

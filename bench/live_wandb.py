"""``live_progress``'s W&B part (issue 43): one waiter process over N running jobs whose W&B runs
train (the W&B stand-in of ``test_support``, in this process, a run per job whose summary's
``train/step`` moves), progress off (no W&B run named), on (each run's summary read every
``--live-wandb-interval``) and on with ``[volcano_wandb] progress_annotation`` (each line also
written on its job) at the largest N, and with a client per read (as before issue 43: a
``wandb.Api`` made, its key checked, for every read) at the smallest. The waiter's CPU and
RSS, its wandb-core's, the W&B reads and clients, the apiserver's requests less its background.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from typing import Any

from common import NotMeasured, managed_job, say, table
from waiters import background, net_breakdown, scale_run, with_band

from test_support.wandb_standin import WandbStandin

KEY = "bench" + "k" * 40
ENTITY, PROJECT, CONN_ID = "bench", "live-progress", "wandb_bench"
#: How the stand-in's runs train: this many steps a second from its start, of this many.
STEPS_PER_SECOND, TOTAL_STEPS = 10, 10**7
#: The sides measured, by name: the driver's options and the waiter's settings.
SIDES = {
    "off": ({}, {}),
    "on": ({"wandb_conn": CONN_ID}, {}),
    "annotated": ({"wandb_conn": CONN_ID}, {"AIRFLOW__VOLCANO_WANDB__PROGRESS_ANNOTATION": "True"}),
    "client_per_read": ({"wandb_conn": CONN_ID, "wandb_client_per_read": True}, {}),
}
#: The sides measured at the largest N only, and at the smallest only.
LARGEST, SMALLEST = ("annotated",), ("client_per_read",)


class TrainingRuns(WandbStandin):
    """The stand-in, each of whose runs is asked for its summary as it trains: the step it has
    reached now (``train/step``, ``_step``, ``_timestamp``) and its total."""

    started = time.time()

    def _op_Run(self, variables: dict[str, Any]) -> dict[str, Any]:
        step = min(TOTAL_STEPS, int((time.time() - self.started) * STEPS_PER_SECOND))
        where = (variables.get("entity"), variables.get("project"), variables.get("name"))
        if self.run(*where) is not None:  # type: ignore[arg-type]
            moved = {"train/step": step, "train/total_steps": TOTAL_STEPS}
            self.log_step(*where, step, **moved)  # type: ignore[arg-type]
        return super()._op_Run(variables)


def run(ctx) -> dict:
    sizes = sorted(int(n) for n in str(ctx.live_wandb_jobs).split(","))
    cluster, interval = ctx.cluster, ctx.live_wandb_interval
    namespace = cluster.create_namespace("bench-wandb")
    names = [f"train-{i:04d}" for i in range(sizes[-1])]
    jobs_file = ctx.work / "wandb-names.json"
    jobs_file.write_text(json.dumps(names))
    say(f"live_progress: creating {len(names)} running jobs in {namespace}")
    bodies = [managed_job(name, 7200, run_id=namespace, index=i) for i, name in enumerate(names)]
    started = cluster.start_jobs(namespace, bodies)
    idle = background(cluster, "live_progress")
    standin = TrainingRuns(api_key=KEY).start()
    for name in names:
        standin.add_run(ENTITY, PROJECT, name, summary={}, state="running")
    conn = {"conn_type": "wandb", "host": standin.url, "password": KEY}
    env = {**ctx.env, "AIRFLOW__VOLCANO_WANDB__PROGRESS_INTERVAL": str(interval)}
    env |= {"WANDB_DIR": str(ctx.work / "wandb"), "WANDB_MODE": "online"}
    env[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps(
        {**conn, "extra": {"entity": ENTITY, "project": PROJECT}}
    )
    samples: dict[tuple[int, str], list[dict]] = {}
    try:
        for jobs in sizes:
            for side, (extra, settings) in SIDES.items():
                if (side in LARGEST and jobs != sizes[-1]) or (
                    side in SMALLEST and jobs != sizes[0]
                ):
                    continue
                for _ in range(ctx.live_wandb_runs):
                    row = measure(
                        ctx, namespace, jobs_file, jobs, idle, standin, env | settings, extra
                    )
                    samples.setdefault((jobs, side), []).append(row)
                    say(f"live_progress: W&B {side} N={jobs}: {json.dumps(row)[:600]}")
    finally:
        standin.stop()
        cluster.delete_namespace(namespace)
    p = {"sizes": sizes, "runs": ctx.live_wandb_runs, "progress_interval_s": interval}
    p |= {"settle_s": interval, "window_s": ctx.window, "steps_per_second": STEPS_PER_SECOND}
    p |= {"jobs_running_after_s": round(started["running_s"], 1), "rows": medians(samples)}
    p["measured"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return p


def measure(ctx, namespace, jobs_file, jobs, idle, standin, env, extra) -> dict:
    """One waiter over the first ``jobs`` jobs: a settle of one ``progress_interval`` after the
    watch's first LIST (the first reads of every run are over), then the window."""
    out = ctx.work / f"wandb-{jobs}-{time.monotonic_ns()}.json"
    clients_before = standin.operations().count("Viewer")
    settle = ctx.live_wandb_interval
    result, marks = scale_run(
        ctx, namespace, jobs_file, out, "watch", env=env, jobs=jobs, settle=settle, **extra
    )
    (s_t, s), (e_t, e) = marks["start"], marks["end"]
    minutes = (e_t - s_t) / 60
    asked = [r for r in list(standin.requests) if s_t <= r.received_at <= e_t]
    reads = sum(r.operation == "Run" for r in asked)
    breakdown = net_breakdown(s, e, minutes, idle[2])
    row = {"jobs": jobs, "load_1min": round(os.getloadavg()[0], 2)}
    row |= {
        "cpu_s_per_min": round(result["cpu_s_per_min"], 2),
        "rss_mb": round(result["rss_mb"], 1),
    }
    row |= {"helper_cpu_s_per_min": round(result["helper_cpu_s_per_min"], 2)}
    row |= {"helper_rss_mb": round(result["helper_rss_mb"], 1)}
    row |= {"apiserver_requests_per_min": breakdown["waiter_requests_per_min"]}
    row |= {"apiserver_requests_band_per_min": breakdown["waiter_requests_band_per_min"]}
    row |= {"by_verb_resource": breakdown["by_verb_resource"]}
    row |= {"patch_jobs_per_min": breakdown["by_verb_resource"].get("PATCH jobs", 0.0)}
    row |= {"wandb_reads_per_min": round(reads / minutes, 1)}
    row |= {"wandb_reads_per_job": round(reads / jobs, 2)}
    row |= {"wandb_errors": sum(r.status != 200 for r in asked)}
    row |= {"wandb_clients": standin.operations().count("Viewer") - clients_before}
    row |= {"driver": {k: round(result[k], 1) for k in ("wandb_reads_per_min", "wandb_clients")}}
    return row | {"window_s": round(result["window_s"], 1), "fired_early": result["fired_early"]}


def medians(samples: dict[tuple[int, str], list[dict]]) -> list[dict]:
    """One row per N and side: the median of each figure over its runs."""
    rows = []
    for (jobs, side), runs in samples.items():
        row = {"side": side, **runs[0]}
        for key, value in runs[0].items():
            if isinstance(value, (int, float)) and len(runs) > 1:
                row[key] = round(statistics.median(r[key] for r in runs), 2)
        rows.append(row | {"jobs": jobs})
    return rows


def section(p: dict | None) -> list[str]:
    if not p:
        return []
    head = (
        "N | progress | waiter CPU s/min | wandb-core CPU s/min | RSS MB (+ wandb-core) | "
        "W&B reads/min (per job in the window) | W&B clients made | apiserver requests/min "
        "(PATCH jobs)"
    )
    rows = [
        [
            r["jobs"],
            r["side"],
            r["cpu_s_per_min"],
            r["helper_cpu_s_per_min"],
            f"{r['rss_mb']} (+{r['helper_rss_mb']})",
            f"{r['wandb_reads_per_min']} ({r['wandb_reads_per_job']})",
            r["wandb_clients"],
            f"{with_band(r['apiserver_requests_per_min'], r['apiserver_requests_band_per_min'])} "
            f"({r['patch_jobs_per_min']})",
        ]
        for r in p["rows"]
    ]
    return [
        f"W&B progress (issue 43): one waiter process over N running jobs, each with a W&B run "
        f"(the stand-in, training {p['steps_per_second']} steps/s), `progress_interval` "
        f"{p['progress_interval_s']:g} s so that the {p['window_s']:g} s window holds "
        f"{p['window_s'] / p['progress_interval_s']:g} reads per job, after a settle of "
        f"{p['settle_s']:g} s; {p['runs']} run(s) per row (medians), measured {p['measured']}. "
        "`annotated`: `[volcano_wandb] progress_annotation` on; `client_per_read`: a `wandb.Api` "
        "per read, as before the shared client.",
        "",
        *table(head, *rows),
    ]


def goals(p: dict | None) -> list[str]:
    rows = {(r["jobs"], r["side"]): r for r in p["rows"]}
    top = max((jobs for jobs, _ in rows), default=None)
    if (top, "on") not in rows or (top, "off") not in rows:
        raise NotMeasured(f"W&B progress on and off at {top} running jobs")
    on, off = rows[top, "on"], rows[top, "off"]
    extra = on["apiserver_requests_per_min"] - off["apiserver_requests_per_min"]
    band = on["apiserver_requests_band_per_min"] + off["apiserver_requests_band_per_min"]
    most = p["window_s"] / p["progress_interval_s"] + 1
    clients = [r["wandb_clients"] for (_, side), r in rows.items() if side in ("on", "annotated")]
    shared = set(clients) == {1} and on["wandb_reads_per_job"] <= most
    return [
        f"W&B progress at {top} running jobs costs the apiserver nothing (within 10 requests/min): "
        f"{'met' if extra < 10 else 'MISSED'} ({with_band(round(extra, 1), band)} requests/min "
        "on vs off)",
        f"W&B progress read over one client per connection, each job at most once a "
        f"progress_interval: {'met' if shared else 'MISSED'} "
        f"(clients made {clients}; {on['wandb_reads_per_job']} reads per job in the window, "
        f"at most {most:g})",
    ]

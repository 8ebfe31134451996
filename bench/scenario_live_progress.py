"""8. Live progress while deferred (issue 15): one waiter process over ``--live-jobs`` running
jobs whose masters print ``--live-lines`` lines, then go silent, ``follow_master_log`` off and
on in turns (every job followed: the worst case). Medians of CPU, RSS and lines shown. The W&B
progress reads, off and on at ``--live-wandb-jobs``: ``live_wandb.py``. ``--live-parts`` runs
one part alone; the other's figures are kept from the results file, with their date.
"""

from __future__ import annotations

import json
import statistics

import live_wandb
from common import managed_job, say, table
from waiters import scale_run

from airflow_volcano_wandb.testing.cluster.podlogs import LOG_LINES_ANNOTATION

KEYS = ("live_progress",)
NEEDS = "db"
OPTIONS = {
    "live_jobs": (100, 20, "jobs followed (or not)"),
    "live_lines": (200, None, "log lines per master"),
    "live_runs": (3, 1, "runs per side, for medians"),
    "live_parts": ("follow,wandb", None, "follow (the master log), wandb (W&B progress)"),
    "live_wandb_jobs": ("100,1000", "20", "running jobs (comma-separated Ns) for W&B progress"),
    "live_wandb_interval": (20.0, 5.0, "W&B progress: [volcano_wandb] progress_interval (s)"),
    "live_wandb_runs": (1, 1, "W&B progress: runs per side and N"),
}


def pods(o) -> int:
    wandb = max(int(n) for n in str(o.live_wandb_jobs).split(","))
    parts = o.live_parts.split(",")
    return o.live_jobs * ("follow" in parts) + wandb * ("wandb" in parts)


def run(ctx) -> dict:
    """The parts asked for (``--live-parts``), measured in this run; a part not asked for is
    absent (not measured), never carried over from an earlier run."""
    parts = ctx.live_parts.split(",")
    figures = follow_part(ctx) if "follow" in parts else {}
    if "wandb" in parts:
        figures["wandb"] = live_wandb.run(ctx)
    return {"live_progress": figures}


def follow_part(ctx) -> dict:
    cluster, jobs, lines, runs = ctx.cluster, ctx.live_jobs, ctx.live_lines, ctx.live_runs
    namespace = cluster.create_namespace("bench-live")
    names = [f"live-{i:04d}" for i in range(jobs)]
    names_file = ctx.work / "live-names.json"
    names_file.write_text(json.dumps(names))
    bodies = [managed_job(name, 7200, run_id=namespace, index=i) for i, name in enumerate(names)]
    for body in bodies:
        annotations = body["spec"]["tasks"][0]["template"]["metadata"]["annotations"]
        annotations[LOG_LINES_ANNOTATION] = str(lines)
    say(f"live_progress: creating {jobs} jobs in {namespace}, {lines} log lines each")
    cluster.start_jobs(namespace, bodies)
    env = {**ctx.env, "AIRFLOW__VOLCANO_WANDB__MAX_CONCURRENT_LOG_FOLLOWS": str(jobs)}
    samples: dict[bool, list[dict]] = {False: [], True: []}
    for run in range(runs):
        for follow in (False, True):
            out = ctx.work / f"live-{follow}-{run}.json"
            extra = {"follow_master_log": True} if follow else {}
            result, _ = scale_run(ctx, namespace, names_file, out, "watch", env=env, **extra)
            samples[follow].append(result)
            said = f"{result['cpu_s_total']:.2f} CPU s, {result['log_lines']} lines shown"
            say(f"live_progress: follow {'on' if follow else 'off'} run {run + 1}: {said}")
    cluster.delete_namespace(namespace)

    p = {"jobs": jobs, "runs": runs, "lines_per_job": lines}
    p["seconds_measured"] = round(10 + ctx.window, 1)
    for key, name, digits in (
        ("cpu_s_total", "cpu_s", 2),
        ("cpu_s_per_min", "cpu_s_per_min_window", 2),
        ("rss_mb", "rss_mb", 1),
    ):
        for follow, side in ((False, "off"), (True, "on")):
            p[f"{name}_{side}"] = round(statistics.median(r[key] for r in samples[follow]), digits)
    p["log_lines"] = int(statistics.median(r["log_lines"] for r in samples[True]))
    return p


def section(r: dict) -> list[str]:
    p = r["live_progress"]
    wandb = ["", *live_wandb.section(p["wandb"])] if p.get("wandb") else []
    if "cpu_s_off" not in p:  # only the W&B part measured (--live-parts wandb)
        return wandb[1:]
    row = {
        side: [p[f"{k}_{side}"] for k in ("cpu_s", "cpu_s_per_min_window", "rss_mb")]
        for side in ("off", "on")
    }
    return [
        f"One triggerer process, {p['jobs']} waiting jobs, master log following off and on "
        f"(every job followed; {p['lines_per_job']} lines each at start, then silence); "
        f"medians of {p['runs']} runs over {p['seconds_measured']} s from the triggers' "
        f"creation.",
        "",
        *table(
            "following | CPU s | CPU s/min in the silent window | RSS MB | master log lines shown",
            ["off", *row["off"], 0],
            ["on", *row["on"], p["log_lines"]],
        ),
        *wandb,
    ]


def goals(p: dict | None) -> list[str]:
    return live_wandb.goals(p["wandb"])

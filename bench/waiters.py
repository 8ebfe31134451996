"""The measuring processes the scenarios start: an independent observer of a namespace's jobs
(``observer.py``), the trigger driver (``trigger_driver.py``: Airflow's TriggerRunner over the
triggers), and one waiter's figures as the apiserver's metrics and the waiter see them."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from apiserver_metrics import net_breakdown, reads, scrape
from common import PY, REPO, Cluster, say


class Observer:
    """bench/observer.py in a child process, for one namespace."""

    def __init__(self, cluster: Cluster, namespace: str, work: Path) -> None:
        self.path = work / f"observer-{namespace}.jsonl"
        args = ("--kubeconfig", cluster.kubeconfig, "--namespace", namespace, "--out", self.path)
        self.proc = subprocess.Popen([PY, str(REPO / "bench" / "observer.py"), *map(str, args)])
        deadline = time.monotonic() + 60
        while not (self.path.exists() and self.path.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("observer did not start")
            time.sleep(0.2)

    def first(self, phase: str) -> dict[str, dict]:
        """Each job's first record in ``phase``: its wall time ``t`` and its status's ``ltt``."""
        out: dict[str, dict] = {}
        for line in self.path.read_text().splitlines():
            record = json.loads(line) if line.strip() else {}
            if record.get("phase") == phase and record["job"] not in out:
                out[record["job"]] = record
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def driver(
    kind: str, mode: str, interval: float, namespace: str, jobs_file: Path, out: Path, env: dict,
    **extra: Any
) -> subprocess.Popen:  # fmt: skip
    """``trigger_driver.py kind`` over the jobs in ``jobs_file``; ``extra`` are its options
    (``True``: a flag). With ``wait_go`` it says READY once imported and starts on a line."""
    argv = [PY, str(REPO / "bench" / "trigger_driver.py"), kind, "--mode", mode]
    argv += ["--interval", str(interval), "--namespace", namespace]
    argv += ["--jobs-file", str(jobs_file), "--out", str(out)]
    for key, value in extra.items():
        flag = f"--{key.replace('_', '-')}"
        argv += [flag] if value is True else [flag, str(value)]
    stdin = subprocess.PIPE if extra.get("wait_go") else subprocess.DEVNULL
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, stdin=stdin)


def scale_run(ctx, namespace: str, jobs_file: Path, out: Path, mode: str, **extra: Any) -> tuple:
    """One waiter process (``trigger_driver.py scale``: the triggers, a 10 s settle once the
    watches have synced, then ``ctx.window``), the apiserver scraped at the window's marks:
    its result and ``{"start": (t, counters), "end": ...}`` (``apiserver_metrics.scrape``)."""
    env = extra.pop("env", ctx.env)
    interval = extra.pop("interval", 0)
    extra = {"port": ctx.cluster.port, "settle": 10, "window": ctx.window, **extra}
    proc = driver("scale", mode, interval, namespace, jobs_file, out, env, **extra)
    marks: dict[str, tuple[float, dict]] = {}
    for line in proc.stdout:
        for mark in ("start", "end"):
            if line.startswith(f"WINDOW_{mark.upper()}"):
                marks[mark] = scrape(ctx.cluster)
    proc.wait(120)
    return json.loads(out.read_text()), marks


def waiter_row(ctx, namespace: str, jobs_file: Path, jobs: int, how: tuple, idle: tuple, tag: str):
    """One waiter process over ``jobs`` jobs (``how``: its name, the driver's mode and poll
    interval, and its environment): the apiserver's view of it (watches, reads/min less the
    background ``idle``) and its own CPU and RSS."""
    waiter, mode, interval, env = how
    idle_rate, idle_watches, idle_by_key = idle
    out = ctx.work / f"{tag}-{waiter}-{jobs}.json"
    result, marks = scale_run(
        ctx, namespace, jobs_file, out, mode, interval=interval, env=env, jobs=jobs
    )
    (s_t, s), (e_t, e) = marks["start"], marks["end"]
    minutes = (e_t - s_t) / 60
    api_rate = (reads(e) - reads(s)) / minutes - idle_rate
    breakdown = net_breakdown(s["all"], e["all"], minutes, idle_by_key)
    row = {
        "waiter": waiter,
        "jobs": jobs,
        "watch_connections": round(max(e["watches"], s["watches"]) - idle_watches),
        "requests_per_min": round(max(api_rate, 0.0), 1),
        # Requests on jobs and pods, every verb, less the background: what the waiter costs.
        "waiter_requests_per_min": breakdown["waiter_requests_per_min"],
        "by_verb_resource": breakdown["by_verb_resource"],
        "watches_by_resource": breakdown["watches_by_resource"],
        "other_requests_per_min": breakdown["other_requests_per_min"],
        "other_largest": breakdown["other_largest"],
        "pod_watch_connections": breakdown["watches_by_resource"].get("pods", 0),
        "pod_watch_env": result.get("pod_watch_env"),
        "cpu_s_per_min": round(result["cpu_s_per_min"], 2),
        "rss_mb": round(result["rss_mb"], 1),
        "rss_growth_mb": round(result["rss_mb"] - result["rss_before_mb"], 1),
        "client_requests_per_min": round(result["client_requests_per_min"], 1),
        "tcp_connections_max": result["tcp_connections_max"],
        "tcp_connections_mean": round(result["tcp_connections_mean"], 1),
        "expected_requests_per_min": 30 * jobs if mode == "poll" else None,
        "window_s": round(result["window_s"], 1),
        "fired_early": result["fired_early"],
    }
    say(
        f"{tag}: {waiter:<8} N={jobs:<5} watches {row['watch_connections']} job "
        f"{row['pod_watch_connections']} pod, {row['requests_per_min']:.0f} job reads/min, "
        f"{row['waiter_requests_per_min']:.0f} on jobs+pods {row['by_verb_resource']} "
        f"(client {row['client_requests_per_min']:.0f}), {row['cpu_s_per_min']:.2f} CPU s/min, "
        f"RSS {row['rss_mb']:.0f} MB (+{row['rss_growth_mb']:.1f})"
    )
    return row

"""The measuring processes the scenarios start: an independent observer of a namespace's jobs
(``observer.py``), the trigger drivers (``trigger_driver.py``), and one waiter's figures as
the apiserver's metrics and the waiter itself see them (``waiter_row``)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from common import PY, REPO, Cluster, job_api_counters, reads, say


class Observer:
    """bench/observer.py in a child process, for one namespace."""

    def __init__(self, cluster: Cluster, namespace: str, work: Path) -> None:
        self.path = work / f"observer-{namespace}.jsonl"
        self.proc = subprocess.Popen(
            [
                PY,
                str(REPO / "bench" / "observer.py"),
                "--kubeconfig",
                str(cluster.kubeconfig),
                "--namespace",
                namespace,
                "--out",
                str(self.path),
            ],
        )
        deadline = time.monotonic() + 60
        while not (self.path.exists() and self.path.read_text().strip()):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("observer did not start")
            time.sleep(0.2)

    def records(self) -> list[dict]:
        return [json.loads(line) for line in self.path.read_text().splitlines() if line.strip()]

    def first(self, phase: str) -> dict[str, dict]:
        out: dict[str, dict] = {}
        for r in self.records():
            if r.get("phase") == phase and r["job"] not in out:
                out[r["job"]] = r
        return out

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def driver(
    kind: str,
    mode: str,
    interval: float,
    namespace: str,
    names_file: Path,
    out: Path,
    env: dict[str, str],
    **extra: Any,
) -> subprocess.Popen:
    argv = [
        PY,
        str(REPO / "bench" / "trigger_driver.py"),
        kind,
        "--mode",
        mode,
        "--interval",
        str(interval),
        "--namespace",
        namespace,
        "--jobs-file",
        str(names_file),
        "--out",
        str(out),
    ]
    wait_go = extra.pop("wait_go", False)
    if wait_go:
        argv.append("--wait-go")
    for key, value in extra.items():
        flag = f"--{key.replace('_', '-')}"
        argv += [flag] if value is True else [flag, str(value)]
    return subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        stdin=subprocess.PIPE if wait_go else subprocess.DEVNULL,
    )


def scrape(cluster: Cluster) -> tuple[float, dict]:
    return time.monotonic(), job_api_counters(cluster.metrics())


def background(cluster: Cluster, tag: str) -> tuple[float, float]:
    """What the control plane itself reads on Volcano jobs (controller, scheduler), per
    minute, and its open job watches: to subtract, as the metrics do not say who asked."""
    time.sleep(5)
    a_t, a = scrape(cluster)
    time.sleep(20)
    b_t, b = scrape(cluster)
    idle_rate = (reads(b) - reads(a)) / ((b_t - a_t) / 60)
    say(f"{tag}: background {idle_rate:.1f} job reads/min, {b['watches']:.0f} job watches open")
    return idle_rate, b["watches"]


def waiter_row(
    cluster: Cluster,
    env: dict,
    work: Path,
    namespace: str,
    names_file: Path,
    jobs: int,
    how: tuple[str, str, float],
    window: float,
    idle: tuple[float, float],
    tag: str,
) -> dict:
    """One waiter process (``trigger_driver.py scale``) over ``jobs`` jobs: the apiserver's
    view of it (watches, reads/min less the background ``idle``) and its own CPU and RSS."""
    waiter, mode, interval = how
    idle_rate, idle_watches = idle
    out = work / f"{tag}-{waiter}-{jobs}.json"
    proc = driver(
        "scale",
        mode,
        interval,
        namespace,
        names_file,
        out,
        env,
        jobs=jobs,
        port=cluster.port,
        settle=10,
        window=window,
    )
    marks: dict[str, tuple[float, dict]] = {}
    for line in proc.stdout:
        if line.startswith("WINDOW_START"):
            marks["start"] = scrape(cluster)
        elif line.startswith("WINDOW_END"):
            marks["end"] = scrape(cluster)
    proc.wait(120)
    result = json.loads(out.read_text())
    (s_t, s), (e_t, e) = marks["start"], marks["end"]
    minutes = (e_t - s_t) / 60
    api_rate = (reads(e) - reads(s)) / minutes - idle_rate
    row = {
        "waiter": waiter,
        "jobs": jobs,
        "watch_connections": round(max(e["watches"], s["watches"]) - idle_watches),
        "requests_per_min": round(max(api_rate, 0.0), 1),
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
        f"{tag}: {waiter:<8} N={jobs:<5} watches {row['watch_connections']}, "
        f"{row['requests_per_min']:.0f} req/min "
        f"(client {row['client_requests_per_min']:.0f}),"
        f" {row['cpu_s_per_min']:.2f} CPU s/min, RSS {row['rss_mb']:.0f} MB "
        f"(+{row['rss_growth_mb']:.1f})"
    )
    return row

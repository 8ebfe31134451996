"""The measuring processes the scenarios start: an independent observer of a namespace's jobs
(``observer.py``), the trigger drivers (``trigger_driver.py``), and one waiter's figures as
the apiserver's metrics and the waiter itself see them (``waiter_row``)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from common import (
    PY,
    REPO,
    Cluster,
    api_counters,
    job_api_counters,
    rates,
    reads,
    say,
    waiter_resource,
)


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
    """The apiserver's counters now: on Volcano jobs (``job_api_counters``) and, under
    ``"all"``, every request by verb and resource and the open watches by resource."""
    text = cluster.metrics()
    counters = job_api_counters(text)
    counters["all"] = api_counters(text)
    return time.monotonic(), counters


def background(cluster: Cluster, tag: str) -> tuple[float, float, dict]:
    """What the control plane itself reads on Volcano jobs (controller, scheduler), per
    minute, and its open job watches: to subtract, as the metrics do not say who asked. The
    third item is the same for every verb and resource (``rates`` per minute, open
    ``watches`` by resource)."""
    time.sleep(5)
    a_t, a = scrape(cluster)
    # A minute: the control plane's own requests are mostly its watches starting again, now
    # and then; over 20 s one such request read as 3 a minute, subtracted from every window.
    time.sleep(60)
    b_t, b = scrape(cluster)
    minutes = (b_t - a_t) / 60
    idle_rate = (reads(b) - reads(a)) / minutes
    by_key = {
        "rates": rates(a["all"]["requests"], b["all"]["requests"], minutes),
        "watches": b["all"]["watches"],
    }
    say(f"{tag}: background {idle_rate:.1f} job reads/min, {b['watches']:.0f} job watches open")
    return idle_rate, b["watches"], by_key


def net_breakdown(start: dict, end: dict, minutes: float, idle: dict) -> dict:
    """A waiter's requests per minute by verb and resource, and its watches by resource: the
    window's less the background's (``idle``, from ``background``).

    Only the resources a waiter touches (Volcano jobs, pods, their subresources) are broken
    down, those that moved by at least 0.5 a minute; the control plane's own requests on
    everything else (mostly its watches timing out and starting again, one request each, at
    random) are summed apart, as ``other_requests_per_min``: what is left of them after the
    background is subtracted is the noise of the method."""
    window = rates(start["requests"], end["requests"], minutes)
    keys = set(window) | set(idle["rates"])
    by_key = {k: window.get(k, 0.0) - idle["rates"].get(k, 0.0) for k in keys}
    ours = {k: v for k, v in by_key.items() if waiter_resource(k)}
    watches = {
        r: max(start["watches"].get(r, 0.0), end["watches"].get(r, 0.0))
        - idle["watches"].get(r, 0.0)
        for r in set(start["watches"]) | set(end["watches"])
        if waiter_resource(f"WATCH {r}")
    }
    return {
        "by_verb_resource": {k: round(v, 1) for k, v in sorted(ours.items()) if abs(v) >= 0.5},
        "watches_by_resource": {r: round(n) for r, n in sorted(watches.items()) if round(n)},
        "waiter_requests_per_min": round(max(0.0, sum(ours.values())), 1),
        "other_requests_per_min": round(sum(v for k, v in by_key.items() if k not in ours), 1),
        "other_largest": largest({k: v for k, v in by_key.items() if k not in ours}),
    }


def largest(rates_by_key: dict[str, float], count: int = 3) -> dict[str, float]:
    """The ``count`` rates farthest from zero: what ``other_requests_per_min`` is made of."""
    top = sorted(rates_by_key.items(), key=lambda item: -abs(item[1]))[:count]
    return {k: round(v, 1) for k, v in top if abs(v) >= 0.5}


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
    idle_rate, idle_watches, idle_by_key = idle
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
        f"{row['pod_watch_connections']} pod, "
        f"{row['requests_per_min']:.0f} job reads/min, "
        f"{row['waiter_requests_per_min']:.0f} on jobs+pods {row['by_verb_resource']} "
        f"(client {row['client_requests_per_min']:.0f}),"
        f" {row['cpu_s_per_min']:.2f} CPU s/min, RSS {row['rss_mb']:.0f} MB "
        f"(+{row['rss_growth_mb']:.1f})"
    )
    return row

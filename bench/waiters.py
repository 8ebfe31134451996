"""The measuring processes the scenarios start (an observer of a namespace's jobs: this file
as a program; the trigger driver), and one waiter's figures as it and the apiserver's /metrics
see them. The apiserver does not say who asked: a scenario scrapes before and after a window
and subtracts the control plane's own rate, measured idle (``background``).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from common import GROUP, PLURAL, PY, REPO, VERSION, Cluster, phase, say, wait_until

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}\s+([0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
COUNTERS = {"apiserver_request_total", "apiserver_longrunning_requests"}


class Observer:
    """An independent clock for job phase changes (``lastTransitionTime`` has second
    resolution): this file as a program, its own watch on one namespace."""

    def __init__(self, cluster: Cluster, namespace: str, work: Path) -> None:
        self.path = work / f"observer-{namespace}.jsonl"
        args = ("--kubeconfig", cluster.kubeconfig, "--namespace", namespace, "--out", self.path)
        self.proc = subprocess.Popen([PY, __file__, *map(str, args)])

        def started() -> bool:
            if self.proc.poll() is not None:
                raise RuntimeError("observer did not start")
            return self.path.exists() and bool(self.path.read_text().strip())

        wait_until(started, 60, "the observer", 0.2)

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


def observe(kubeconfig: str, namespace: str, out_path: str) -> None:
    """After a ``{"ready"}`` line, one per phase change: ``{"job", "phase", "t", "ltt"}``."""
    from kubernetes import client, config, watch

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=kubeconfig))
    args = (GROUP, VERSION, namespace, PLURAL)
    with open(out_path, "a", buffering=1) as out:
        listed = api.list_namespaced_custom_object(*args)
        version = listed["metadata"]["resourceVersion"]
        phases = {job["metadata"]["name"]: phase(job) for job in listed["items"]}
        out.write(json.dumps({"ready": time.time()}) + "\n")
        while True:
            kw = {"resource_version": version, "timeout_seconds": 600}
            stream = watch.Watch().stream(
                api.list_namespaced_custom_object, *args, allow_watch_bookmarks=True, **kw
            )
            for event in stream:
                now, obj = time.time(), event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] in ("BOOKMARK", "ERROR"):
                    continue
                name, state = obj["metadata"]["name"], (obj.get("status") or {}).get("state", {})
                now_in = "Deleted" if event["type"] == "DELETED" else state.get("phase", "")
                if phases.get(name) != now_in:
                    phases[name] = now_in
                    line = {"job": name, "phase": now_in, "t": now}
                    out.write(json.dumps({**line, "ltt": state.get("lastTransitionTime")}) + "\n")


def driver(
    kind: str, mode: str, interval: float, namespace: str, jobs_file: Path, out: Path, env: dict,
    **extra: Any
) -> subprocess.Popen:  # fmt: skip
    """``trigger_driver.py kind`` over the jobs in ``jobs_file``; ``extra``: its options
    (``True``: a flag; ``wait_go``: READY once imported, then it starts on a line)."""
    argv = [PY, str(REPO / "bench" / "trigger_driver.py"), kind, "--mode", mode]
    argv += ["--interval", str(interval), "--namespace", namespace]
    argv += ["--jobs-file", str(jobs_file), "--out", str(out)]
    for key, value in extra.items():
        flag = f"--{key.replace('_', '-')}"
        argv += [flag] if value is True else [flag, str(value)]
    stdin = subprocess.PIPE if extra.get("wait_go") else subprocess.DEVNULL
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True, stdin=stdin)


def wait_for_line(proc: subprocess.Popen, prefix: str) -> None:
    """Until the driver prints a line starting with ``prefix`` (``READY``, ``SYNCED``)."""
    while (line := proc.stdout.readline()) and not line.startswith(prefix):
        pass
    if not line:
        raise RuntimeError(f"trigger driver exited before printing {prefix}")


def scale_run(ctx, namespace: str, jobs_file: Path, out: Path, mode: str, **extra: Any) -> tuple:
    """One ``trigger_driver.py scale`` (a 10 s settle, then ``ctx.window``): its result, and the
    apiserver scraped at the window's marks (``{"start": scrape(), "end": ...}``)."""
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
    """One waiter process over ``jobs`` jobs (``how``: name, driver mode, poll interval, env):
    the apiserver's view of it less the background ``idle``, and its own CPU and RSS."""
    waiter, mode, interval, env = how
    idle_rate, idle_watches, idle_by_key = idle
    out = ctx.work / f"{tag}-{waiter}-{jobs}.json"
    result, marks = scale_run(
        ctx, namespace, jobs_file, out, mode, interval=interval, env=env, jobs=jobs
    )
    (s_t, s), (e_t, e) = marks["start"], marks["end"]
    minutes = (e_t - s_t) / 60
    api_rate = (reads(e) - reads(s)) / minutes - idle_rate
    breakdown = net_breakdown(s, e, minutes, idle_by_key)
    watches = max(job_watches(e), job_watches(s)) - idle_watches
    row = {"waiter": waiter, "jobs": jobs, "watch_connections": round(watches)}
    # Requests on jobs and pods, every verb, less the background: what the waiter costs.
    row |= {"requests_per_min": round(api_rate, 1), **breakdown}
    row["pod_watch_connections"] = breakdown["watches_by_resource"].get("pods", 0)
    row |= {"pod_watch_env": result.get("pod_watch_env")}
    row |= {
        "cpu_s_per_min": round(result["cpu_s_per_min"], 2),
        "rss_mb": round(result["rss_mb"], 1),
    }
    row["rss_growth_mb"] = round(result["rss_mb"] - result["rss_before_mb"], 1)
    row["client_requests_per_min"] = round(result["client_requests_per_min"], 1)
    row["tcp_connections_max"] = result["tcp_connections_max"]
    row["tcp_connections_mean"] = round(result["tcp_connections_mean"], 1)
    row["expected_requests_per_min"] = 30 * jobs if mode == "poll" else None
    row |= {"window_s": round(result["window_s"], 1), "fired_early": result["fired_early"]}
    say(
        f"{tag}: {waiter} N={jobs}: {row['by_verb_resource']}, watches "
        f"{row['watches_by_resource']}, {row['cpu_s_per_min']} CPU s/min, RSS {row['rss_mb']} MB"
    )
    return row


def parse_metrics(text: str, names: set[str]) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        m = _SAMPLE.match(line) if line and line[0] != "#" else None
        if m and m.group(1) in names:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def request_key(labels: dict[str, str]) -> str:
    """``"LIST pods"``, ``"GET pods/log"``: verb and resource (and group, unless Volcano's)."""
    resource = labels.get("resource", "?")
    if labels.get("subresource"):
        resource += "/" + labels["subresource"]
    if labels.get("group", "") not in ("", GROUP):
        resource += f" ({labels['group']})"
    return f"{labels.get('verb', '?')} {resource}"


def api_counters(text: str) -> dict[str, dict[str, float]]:
    """The requests so far by verb and resource, and the open watches by resource."""
    counts: dict[str, dict[str, float]] = {"requests": {}, "watches": {}}
    for name, labels, value in parse_metrics(text, COUNTERS):
        if name == "apiserver_longrunning_requests":
            if labels.get("verb") != "WATCH":
                continue
            kind, key = "watches", request_key(labels).removeprefix("WATCH ")
        elif labels.get("resource"):  # not /metrics, /readyz...: the API's objects
            kind, key = "requests", request_key(labels)
        else:
            continue
        counts[kind][key] = counts[kind].get(key, 0.0) + value
    return counts


def rates(start: dict[str, float], end: dict[str, float], minutes: float) -> dict[str, float]:
    """Per-minute rates of the counters that moved between two scrapes."""
    return {k: (end[k] - start.get(k, 0.0)) / minutes for k in end if end[k] != start.get(k, 0.0)}


def waiter_resource(key: str) -> bool:
    """A resource a waiter reads or writes: the Volcano jobs and their pods (with their logs)."""
    resource = key.split(" ", 1)[1]
    return resource.split("/")[0] in ("jobs", "pods") and "(" not in resource


def reads(counters: dict) -> float:
    """The reads of Volcano jobs (GET, LIST, WATCH) so far, from ``api_counters``."""
    return sum(counters["requests"].get(f"{verb} jobs", 0.0) for verb in ("GET", "LIST", "WATCH"))


def job_watches(counters: dict) -> float:
    return counters["watches"].get("jobs", 0.0)


def scrape(cluster) -> tuple[float, dict]:
    """The time and the apiserver's counters now (``api_counters``)."""
    return time.monotonic(), api_counters(cluster.metrics())


def background(cluster, tag: str) -> tuple[float, float, dict]:
    """The control plane's own job reads per minute and open job watches, idle, and every verb
    and resource's (``rates`` per minute, open ``watches``): to subtract. Measured as two
    halves, whose difference on the waiter's resources is the background's noise (``band``)."""
    time.sleep(5)
    a_t, a = scrape(cluster)
    # A minute: the control plane's own requests are mostly its watches starting again, now
    # and then; over 20 s one such request read as 3 a minute, subtracted from every window.
    time.sleep(30)
    m_t, m = scrape(cluster)
    time.sleep(30)
    b_t, b = scrape(cluster)
    minutes = (b_t - a_t) / 60
    idle_rate = (reads(b) - reads(a)) / minutes
    halves = [rates(x["requests"], y["requests"], (y_t - x_t) / 60) for (x_t, x), (y_t, y) in
              (((a_t, a), (m_t, m)), ((m_t, m), (b_t, b)))]  # fmt: skip
    first, second = (sum(v for k, v in h.items() if waiter_resource(k)) for h in halves)
    by_key = {"rates": rates(a["requests"], b["requests"], minutes), "watches": b["watches"]}
    by_key["band_per_min"] = abs(first - second)
    say(f"{tag}: background {idle_rate:.1f} job reads/min, {job_watches(b):.0f} job watches open")
    return idle_rate, job_watches(b), by_key


def net_breakdown(start: dict, end: dict, minutes: float, idle: dict) -> dict:
    """A waiter's requests per minute and watches, by verb and resource where it touches them
    (jobs, pods), less the background's (``idle``), with the noise of that subtraction
    (``waiter_requests_band_per_min``: the background's own, at least one request in the
    window), never clamped: a negative rate is noise, and says so beside its band. The rest,
    the control plane's watches starting again at random, is summed apart
    (``other_requests_per_min``)."""
    window = rates(start["requests"], end["requests"], minutes)
    keys = set(window) | set(idle["rates"])
    by_key = {k: window.get(k, 0.0) - idle["rates"].get(k, 0.0) for k in keys}
    ours = {k: v for k, v in by_key.items() if waiter_resource(k)}
    others = {k: v for k, v in by_key.items() if k not in ours}
    watches = {
        r: max(start["watches"].get(r, 0.0), end["watches"].get(r, 0.0))
        - idle["watches"].get(r, 0.0)
        for r in set(start["watches"]) | set(end["watches"])
        if waiter_resource(f"WATCH {r}")
    }
    band = max(idle["band_per_min"], 1 / minutes)
    return {
        "waiter_requests_per_min": round(sum(ours.values()), 1),
        "waiter_requests_band_per_min": round(band, 1),
        "by_verb_resource": {k: round(v, 1) for k, v in sorted(ours.items()) if abs(v) >= 0.5},
        "watches_by_resource": {r: round(n) for r, n in sorted(watches.items()) if round(n)},
        "other_requests_per_min": round(sum(others.values()), 1),
        "other_largest": largest(others),
    }


def with_band(rate: float, band: float) -> str:
    """A rate with its noise, as a reader should take it: ``0 ± 2``."""
    return f"{rate + 0.0:g} ± {band:g}"  # + 0.0: a rate of -0.0 reads 0


def largest(rates_by_key: dict[str, float], count: int = 3) -> dict[str, float]:
    """The ``count`` rates farthest from zero (what ``other_requests_per_min`` is made of)."""
    top = sorted(rates_by_key.items(), key=lambda item: -abs(item[1]))[:count]
    return {k: round(v, 1) for k, v in top if abs(v) >= 0.5}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="the observer of one namespace's jobs")
    for flag in ("--kubeconfig", "--namespace", "--out"):
        parser.add_argument(flag, required=True)
    options = parser.parse_args()
    observe(options.kubeconfig, options.namespace, options.out)

"""Run every benchmark on the local Volcano cluster; write bench/results/latest.{json,md}.

    make bench                     # cluster-up, then this script
    .venv/bin/python bench/run_all.py --cluster-dir .state/cluster [--quick]

Measures, each side by side with polling baselines in the same run (issue 8):

1. completion-detection latency: provider trigger (shared watch) vs polling every 2 s and
   10 s through the same hook, against an independent observer's watch and against
   Volcano's lastTransitionTime;
2. triggerer scale: N = 100, 500, 1000 triggers in one event loop driven by Airflow's
   TriggerRunner (bench/trigger_driver.py), provider vs 2 s polling: watch connections and
   requests per minute from the apiserver's /metrics, CPU and RSS of that process;
3. operator overhead: execute() start to job created; render_job (bench/render_bench.py);
4. end-to-end overhead under dag.test(), sync vs deferrable (bench/e2e_bench.py).

Adds simulated nodes to the cluster for the 1000 jobs and removes them (and its namespaces)
at the end. A script that prints figures: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import (
    REPO,
    Cluster,
    airflow_env,
    job_api_counters,
    managed_job,
    parse_k8s_time,
    reads,
    summary,
)

RESULTS = REPO / "bench" / "results"
PY = sys.executable
T0 = time.monotonic()


def say(message: str) -> None:
    print(f"[bench {time.monotonic() - T0:6.0f}s] {message}", flush=True)


# ---- helpers ---------------------------------------------------------------------------


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
        argv += [f"--{key.replace('_', '-')}", str(value)]
    return subprocess.Popen(
        argv,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
        stdin=subprocess.PIPE if wait_go else subprocess.DEVNULL,
    )


# ---- 1. completion latency -------------------------------------------------------------


def completion_latency(cluster: Cluster, env: dict, work: Path, jobs: int) -> dict:
    namespace = cluster.create_namespace("bench-latency")
    observer = Observer(cluster, namespace, work)
    names = [f"lat-{i:04d}" for i in range(jobs)]
    names_file = work / "latency-names.json"
    names_file.write_text(json.dumps(names))
    # The three waiters import Airflow first (slow on a busy machine), then wait for "go".
    waiters = {
        key: driver(
            "latency",
            mode,
            interval,
            namespace,
            names_file,
            work / f"lat-{key}.json",
            env,
            timeout=180,
            wait_go=True,
        )
        for key, mode, interval in (
            ("watch", "watch", 0),
            ("poll_2s", "poll", 2),
            ("poll_10s", "poll", 10),
        )
    }
    for proc in waiters.values():
        while (line := proc.stdout.readline()) and not line.startswith("READY"):
            pass
    # Jobs end together: each runs until a common wall-clock time (give or take how long
    # Volcano takes to start it), well after every waiter has started.
    end_at = time.time() + 30 + jobs / 10
    say(
        f"latency: creating {jobs} jobs in {namespace}, ending together in "
        f"~{end_at - time.time():.0f} s"
    )
    duration = max(end_at - time.time(), 15)
    cluster.create_jobs(
        namespace,
        [managed_job(n, duration, run_id=namespace, index=i) for i, n in enumerate(names)],
    )
    for proc in waiters.values():
        proc.stdin.write("go\n")
        proc.stdin.close()
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    for proc in waiters.values():
        proc.wait(300)
    observer.stop()
    completed = observer.first("Completed")
    ends = sorted(r["t"] for r in completed.values())
    out: dict[str, Any] = {
        "vs_observer": {},
        "vs_status_time": {},
        "jobs": jobs,
        "namespace": namespace,
    }
    if ends:
        out["burst_spread_s"] = round(ends[-1] - ends[0], 2)
    for key in ("watch", "poll_2s", "poll_10s"):
        result = json.loads((work / f"lat-{key}.json").read_text())
        vs_obs, vs_ltt, missing = [], [], 0
        for event in result["events"]:
            seen = completed.get(event["job"])
            if event["outcome"] != "succeeded" or seen is None:
                missing += 1
                continue
            vs_obs.append(event["t"] - seen["t"])
            ltt = parse_k8s_time(seen.get("ltt"))
            if ltt is not None:
                vs_ltt.append(event["t"] - ltt)
        out["vs_observer"][key] = summary(vs_obs)
        out["vs_status_time"][key] = summary(vs_ltt)
        out["vs_observer"][key]["unmatched"] = missing + (jobs - len(result["events"]))
    cluster.delete_namespace(namespace)
    return out


# ---- 2. triggerer scale ----------------------------------------------------------------


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

    def scrape() -> tuple[float, dict]:
        return time.monotonic(), job_api_counters(cluster.metrics())

    # What the control plane itself reads on Volcano jobs meanwhile (controller, scheduler),
    # to subtract: the metrics do not say who asked.
    time.sleep(5)
    a_t, a = scrape()
    time.sleep(20)
    b_t, b = scrape()
    idle_rate = (reads(b) - reads(a)) / ((b_t - a_t) / 60)
    idle_watches = b["watches"]
    say(f"scale: background {idle_rate:.1f} job reads/min, {idle_watches:.0f} job watches open")

    rows = []
    for jobs in sizes:
        for waiter, mode, interval in (("provider", "watch", 0), ("poll_2s", "poll", 2)):
            out = work / f"scale-{waiter}-{jobs}.json"
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
                    marks["start"] = scrape()
                elif line.startswith("WINDOW_END"):
                    marks["end"] = scrape()
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
            rows.append(row)
            say(
                f"scale: {waiter:<8} N={jobs:<5} watches {row['watch_connections']}, "
                f"{row['requests_per_min']:.0f} req/min "
                f"(client {row['client_requests_per_min']:.0f}),"
                f" {row['cpu_s_per_min']:.2f} CPU s/min, RSS {row['rss_mb']:.0f} MB "
                f"(+{row['rss_growth_mb']:.1f})"
            )
    cluster.delete_namespace(namespace)
    return {
        "rows": rows,
        "background_reads_per_min": round(idle_rate, 1),
        "jobs_created_s": round(created_s, 1),
        "jobs_running_s": round(running_s, 1),
    }


# ---- 3 + 4. operator and end-to-end overhead ---------------------------------------------


def render(repeat: int) -> dict:
    subprocess.run(
        [PY, str(REPO / "bench" / "render_bench.py"), "--repeat", str(repeat)], check=True
    )
    results = json.loads((RESULTS / "render.json").read_text())["results"]
    return {
        "seed": round(results["seed (dict) + overrides"]["median_ms"], 3),
        "tasks_100": round(results["100 tasks (dict) + overrides"]["median_ms"], 3),
        "cases": {k: round(v["median_ms"], 3) for k, v in results.items()},
    }


def end_to_end(cluster: Cluster, env: dict, work: Path, runs: int) -> dict:
    namespace = cluster.create_namespace("bench-e2e")
    observer = Observer(cluster, namespace, work)
    out = work / "e2e.json"
    say(f"e2e: dag.test() x {runs} per mode (plus one warm-up) in {namespace}")
    subprocess.run(
        [
            PY,
            str(REPO / "bench" / "e2e_bench.py"),
            "--namespace",
            namespace,
            "--runs",
            str(runs + 1),
            "--out",
            str(out),
        ],
        env=env,
        check=True,
    )
    observer.stop()
    data = json.loads(out.read_text())
    running, completed = observer.first("Running"), observer.first("Completed")
    per_mode: dict[str, dict[str, list[float]]] = {}
    submit: list[float] = []
    for run in data["runs"]:
        if run["job"].endswith("-0"):  # warm-up: the first run pays the imports
            continue
        if run["state"] != "success" or run["job"] not in completed:
            continue
        job_run = completed[run["job"]]["t"] - running[run["job"]]["t"]
        task = run["ti_end"] - run["ti_start"]
        lifetime = completed[run["job"]]["t"] - run["created"]
        m = per_mode.setdefault(
            run["mode"],
            {
                "overhead": [],
                "task": [],
                "job_running": [],
                "after_completed": [],
                "before_created": [],
                "overhead_vs_lifetime": [],
            },
        )
        m["overhead"].append(task - job_run)
        m["overhead_vs_lifetime"].append(task - lifetime)
        m["task"].append(task)
        m["job_running"].append(job_run)
        m["after_completed"].append(run["ti_end"] - completed[run["job"]]["t"])
        m["before_created"].append(run["created"] - run["ti_start"])
        submit.append(run["created"] - run["execute_start"])
    cluster.delete_namespace(namespace)
    return {
        "submit_overhead_s": summary(submit),
        "e2e": {mode: {k: summary(v, 3) for k, v in m.items()} for mode, m in per_mode.items()},
        "sim_duration_s": data["duration"],
    }


# ---- report ----------------------------------------------------------------------------


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 1) if a and b else None


def markdown(r: dict) -> str:
    lat = r["completion_latency_s"]
    lines = [
        "# Benchmarks (latest run)",
        "",
        f"{r['meta']['date']}, {r['meta']['cpus']} CPUs, Python {r['meta']['python']}, "
        f"load average before: {r['meta']['load_before']}; total {r['meta']['total_s']:.0f} s. "
        "Reproduce: `make bench`.",
        "",
        "## 1. Completion-detection latency",
        "",
        f"{lat['n_jobs']} jobs ending together (observed spread {lat.get('burst_spread_s')} s); "
        "each waited on at once by the provider trigger and by the two polling baselines, "
        "each in its own process driven by Airflow's TriggerRunner.",
        "",
        "| waiter | median vs observer | p99 vs observer | median vs lastTransitionTime | "
        "p99 vs lastTransitionTime | n |",
        "|---|---|---|---|---|---|",
    ]
    for key in ("watch", "poll_2s", "poll_10s"):
        o, s = lat[key], lat["vs_status_time"][key]
        lines.append(
            f"| {key} | {o['median']} s | {o['p99']} s | {s['median']} s | "
            f"{s['p99']} s | {o['n']} |"
        )
    lines += [
        "",
        f"Ratios (baseline median / provider median): vs observer poll 2 s "
        f"{lat['ratio_poll_2s']}x, poll 10 s {lat['ratio_poll_10s']}x; vs lastTransitionTime "
        f"poll 2 s {lat['ratio_vs_status_time']['poll_2s']}x, poll 10 s "
        f"{lat['ratio_vs_status_time']['poll_10s']}x. `lastTransitionTime` has "
        "second resolution, so the status-time column is inflated by up to 1 s (about 0.5 s on "
        "average); the observer column is the sub-second figure.",
        "",
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
        "",
        "## 3. Operator overhead",
        "",
        f"- `execute()` start to job created: median {r['submit_overhead_s']['median']} s, "
        f"p99 {r['submit_overhead_s']['p99']} s (n={r['submit_overhead_s']['n']}).",
        f"- `render_job`: seed {r['render_ms']['seed']} ms, 100 tasks {r['render_ms']['tasks_100']}"
        " ms (median; bench/render_bench.py).",
        "",
        "## 4. End-to-end overhead under `dag.test()`",
        "",
        "| mode | task duration | job running (Running to Completed) | overhead | "
        "task start to job created | job Completed to task end | n |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, m in r["e2e_overhead_s"].items():
        lines.append(
            f"| {mode} | {m['task']['median']} s | {m['job_running']['median']} s | "
            f"{m['overhead']['median']} s (p99 {m['overhead']['p99']}) | "
            f"{m['before_created']['median']} s | {m['after_completed']['median']} s | "
            f"{m['overhead']['n']} |"
        )
    lines += ["", "## Goals", ""]
    lines += [f"- {g}" for g in r["goals"]]
    return "\n".join(lines) + "\n"


def goals(r: dict) -> list[str]:
    out = []
    w = r["completion_latency_s"]["watch"]
    ok = w["median"] is not None and w["median"] < 0.3 and w["p99"] < 1
    out.append(
        f"latency median < 0.3 s and p99 < 1 s: {'met' if ok else 'MISSED'} "
        f"(median {w['median']} s, p99 {w['p99']} s vs observer)"
    )
    prov = [x for x in r["triggerer_scale"] if x["waiter"] == "provider"]
    if prov:
        conns = {x["watch_connections"] for x in prov}
        out.append(
            f"O(1) watch connections per namespace: {'met' if conns == {1} else 'CHECK'} "
            f"({sorted(conns)} at N={[x['jobs'] for x in prov]})"
        )
        rates = [x["requests_per_min"] for x in prov]
        out.append(
            f"requests/min independent of N: provider {rates} at N={[x['jobs'] for x in prov]}"
        )
        top = max(prov, key=lambda x: x["jobs"])
        met = "met" if top["rss_growth_mb"] < 50 else "MISSED"
        out.append(f"RSS growth < 50 MB at {top['jobs']} jobs: {met} (+{top['rss_growth_mb']} MB)")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster-dir", type=Path, required=True)
    parser.add_argument("--sizes", default="100,500,1000", help="triggerer scale N values")
    parser.add_argument("--latency-jobs", type=int, default=100)
    parser.add_argument("--e2e-runs", type=int, default=4, help="dag.test() runs per mode")
    parser.add_argument("--window", type=float, default=30.0, help="scale window (s)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--keep-work", action="store_true", help="keep the raw files")
    parser.add_argument(
        "--report-only", action="store_true", help="re-render latest.md from latest.json"
    )
    options = parser.parse_args()
    if options.report_only:
        (RESULTS / "latest.md").write_text(
            markdown(json.loads((RESULTS / "latest.json").read_text()))
        )
        return
    if options.quick:
        options.sizes, options.latency_jobs, options.e2e_runs, options.window = "20,50", 20, 1, 10
    sizes = [int(s) for s in options.sizes.split(",")]

    cluster = Cluster(options.cluster_dir)
    work = Path(tempfile.mkdtemp(prefix="avw-bench-"))
    home = work / "airflow"
    shutil.copytree(REPO / "dags", home / "dags", dirs_exist_ok=True)
    shutil.copytree(REPO / "tests" / "dags", home / "dags", dirs_exist_ok=True)
    env = airflow_env(home, cluster.kubeconfig)
    load_before = round(os.getloadavg()[0], 2)
    say(f"work dir {work}; cluster {cluster.server}")
    added = cluster.ensure_pod_capacity(max(sizes) + options.latency_jobs + 50)
    if added:
        say(f"added {len(added)} simulated nodes for capacity")
    results: dict[str, Any] = {}
    try:
        say("render_job")
        results["render_ms"] = render(repeat=500)
        say("airflow db migrate")
        subprocess.run(
            [PY, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True
        )
        e2e = end_to_end(cluster, env, work, options.e2e_runs)
        results["submit_overhead_s"] = e2e["submit_overhead_s"]
        results["e2e_overhead_s"] = e2e["e2e"]
        results["e2e_sim_duration_s"] = e2e["sim_duration_s"]
        lat = completion_latency(cluster, env, work, options.latency_jobs)
        latency = {k: lat["vs_observer"][k] for k in ("watch", "poll_2s", "poll_10s")}
        latency["vs_status_time"] = lat["vs_status_time"]
        latency["n_jobs"] = lat["jobs"]
        latency["burst_spread_s"] = lat.get("burst_spread_s")
        wm = latency["watch"]["median"]
        latency["ratio_poll_2s"] = ratio(latency["poll_2s"]["median"], wm)
        latency["ratio_poll_10s"] = ratio(latency["poll_10s"]["median"], wm)
        # Against the status's own (second-resolution) time the provider's median is ~0.5 s
        # of rounding, so these ratios are the conservative ones.
        st = latency["vs_status_time"]
        latency["ratio_vs_status_time"] = {
            k: ratio(st[k]["median"], st["watch"]["median"]) for k in ("poll_2s", "poll_10s")
        }
        results["completion_latency_s"] = latency
        say(
            f"latency: watch {latency['watch']}, poll_2s {latency['poll_2s']['median']}, "
            f"poll_10s {latency['poll_10s']['median']}"
        )
        scale = triggerer_scale(cluster, env, work, sizes, options.window)
        results["triggerer_scale"] = scale.pop("rows")
        results["scale_meta"] = scale
    finally:
        # Pods go with their namespaces; only then may their simulated nodes go.
        if cluster.wait_namespaces_gone():
            cluster.delete_nodes(added)
        elif added:
            say(f"namespaces still terminating; left nodes {added}")
        if not options.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    results["goals"] = goals(results)
    results["meta"] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": load_before,
        "total_s": round(time.monotonic() - T0, 1),
        "quick": options.quick,
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "latest.md").write_text(markdown(results))
    print(markdown(results))
    say("wrote bench/results/latest.json and latest.md")


if __name__ == "__main__":
    main()

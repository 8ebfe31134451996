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
4. end-to-end overhead under dag.test(), sync vs deferrable (bench/e2e_bench.py);
5. namespace_scale (issue 11): one triggerer, --namespace-waiting triggers (1000) among
   --namespace-jobs other owners' jobs (10000) in one namespace: RSS growth, watch
   connections, first (paginated, label-selected) LIST; vc-controller-manager is stopped
   meanwhile (see namespace_scale());
6. outage (issue 11): kube-apiserver stopped for --outage-s (300 s) while --outage-waiting
   triggers (1000) wait: LIST/WATCH attempts counted in the triggerer against the backoff's
   bound, then every verdict checked against the job's real end, and no job deleted;
7. sweep_burst (issue 17): --sweep-tasks (200) mapped task instances of the operator submit
   at once, then again as retries (bench/sweep_burst.py): submit p50/p99, duplicates, 429s;
   then their wait by the provider's trigger and by 2 s polling (watch connections, req/min);
8. live_progress (issue 15): --live-jobs (100) waiting triggers with master log following
   off vs on: CPU seconds and RSS of the triggerer process (bench/live_progress.py);
9. odd_paths (issue 21): paths a deployment meets once in a while (bench/odd_paths.py):
   restart_false_timeouts, pending timeouts of whole gangs over 20 restarts of every trigger
   with evictions in flight; fixed_name_retries_ok, a retry under a fixed job_name after a
   failed try.
10. handover (issue 26): --handover-jobs (20) deferred jobs over two triggerers of a
    production-shaped Airflow, one frozen past its health-check threshold: jobs deleted,
    wrong verdicts, triggers reassigned, takeover time (bench/handover.py runs the HA trial).
11. e2e_real_airflow (issue 26): --e2e-real-tasks (50) deferred tasks through the real
    scheduler and triggerer of the same production-shaped Airflow: job Completed to task
    success, p50/p99, jobs that end at once (inside defer_settle_seconds) apart from jobs that
    end after it (bench/e2e_real_airflow.py runs tests/reliability/test_e2e_real_airflow.py).
12. resume (issue 23): the example trainer stopped by SIGTERM as a preempted pod is, then
    resumed on its run's checkpoints: steps_before_kill, resumed_from_step, steps_repeated,
    resume_overhead_s, saved_training_s, saved_gpu_seconds, and the same with the checkpoints
    in a W&B artifact (artifact, artifact_overhead_ratio) (bench/resume_bench.py; local
    processes, no cluster).

--quick runs every scenario at smoke-test sizes; --only picks scenarios (a partial run
merges into the results already there); --results writes elsewhere than bench/results.

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
    other_owner_job,
    parse_k8s_time,
    parse_metrics,
    percentile,
    reads,
    summary,
)
from e2e_real_airflow import e2e_real_airflow, e2e_real_airflow_goals, md_e2e_real_airflow
from handover import handover, handover_goals, md_handover
from live_progress import live_progress, md_live_progress

from airflow_volcano_wandb.job.job_status import FAILURE_PHASES
from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR, MAP_INDEX_LABEL
from test_support.faults import (
    start_component,
    stop_component,
    wait_apiserver_ready,
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
        flag = f"--{key.replace('_', '-')}"
        argv += [flag] if value is True else [flag, str(value)]
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


# ---- 5. a crowded namespace -----------------------------------------------------------


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
    """Read the driver's output, scraping the apiserver's job counters at its window marks."""
    marks: dict[str, dict] = {}
    for line in proc.stdout:
        if line.startswith("WINDOW_START"):
            marks["start"] = job_api_counters(cluster.metrics())
        elif line.startswith("WINDOW_END"):
            marks["end"] = job_api_counters(cluster.metrics())
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
        out = work / "namespace-scale.json"
        say(f"namespace: {waiting} triggers in one TriggerRunner, {others} other jobs beside")
        proc = driver(
            "scale", "watch", 0, namespace, jobs_file, out, env,
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
    return {
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


# ---- 6. an apiserver outage ------------------------------------------------------------

# How long after their creation the outage's jobs may still be starting up (jobs Running,
# the driver importing Airflow and syncing): their run time is this plus the outage, so
# they end after it. Any that end before it are counted (ended_before_outage).
OUTAGE_SETUP_S = 90.0
OUTAGE_SETUP_PER_JOB_S = 0.2


def expected_outcome(phase: str) -> str | None:
    """The verdict a job's real end calls for; None while it has not ended."""
    if phase == "Completed":
        return "succeeded"
    return "failed" if phase in FAILURE_PHASES else None


def max_attempts(seconds: float, initial: float, cap: float) -> int:
    """The most list attempts the watcher's backoff allows in ``seconds`` of failures.

    Each delay is at least the unjittered ``initial * 2**k`` capped at ``cap`` (jitter and
    Retry-After only lengthen it), so counting the shortest delays gives the upper bound.
    """
    attempts, elapsed, delay = 1, 0.0, initial
    while elapsed + delay <= seconds:
        elapsed += delay
        attempts += 1
        delay = min(delay * 2, cap)
    return attempts


def wait_for_line(proc: subprocess.Popen, prefix: str) -> None:
    while (line := proc.stdout.readline()) and not line.startswith(prefix):
        pass
    if not line:
        raise RuntimeError(f"trigger driver exited before printing {prefix}")


def take_apiserver_down(cluster: Cluster, seconds: float) -> tuple[float, float]:
    """Stop kube-apiserver for ``seconds``, start it again; return (down, ready) wall times.

    The restart is in a ``finally``: whatever happens, the cluster gets its apiserver back.
    """
    down = time.time()
    argv = stop_component(cluster.state_dir, "kube-apiserver")
    try:
        time.sleep(max(0.0, down + seconds - time.time()))
    finally:
        start_component(cluster.state_dir, "kube-apiserver", argv)
        wait_apiserver_ready(cluster.state_dir, timeout=180)
    return down, time.time()


def calls_between(calls: list, verb: str, start: float, end: float) -> int:
    return sum(1 for t, v in calls if v == verb and start <= t <= end)


def judge_verdicts(events: list[dict], jobs: list[dict], uids: dict[str, str]) -> dict:
    """Compare each trigger's outcome with its job's real end; count jobs that are gone."""
    by_name = {j["metadata"]["name"]: j for j in jobs}
    fired = {e["job"]: e["outcome"] for e in events}
    wrong, missing, deleted, outcomes = [], 0, 0, {}
    for name, uid in uids.items():
        job = by_name.get(name)
        if job is None or job["metadata"]["uid"] != uid:
            deleted += 1
            continue
        phase = ((job.get("status") or {}).get("state") or {}).get("phase", "")
        outcome = fired.get(name)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome is None:
            missing += 1
        elif outcome != expected_outcome(phase):
            wrong.append(f"{name}: {outcome} but the job is {phase or 'without a phase'}")
    return {"wrong": wrong, "missing": missing, "deleted": deleted, "outcomes": outcomes}


def ended_before(jobs: list[dict], when: float) -> int:
    """Jobs whose last transition (their end, for ended jobs) came before ``when``."""
    count = 0
    for job in jobs:
        state = (job.get("status") or {}).get("state") or {}
        ltt = parse_k8s_time(state.get("lastTransitionTime"))
        count += bool(expected_outcome(state.get("phase", "")) and ltt and ltt < when)
    return count


def outage(cluster: Cluster, env: dict, work: Path, waiting: int, seconds: float) -> dict:
    """Stop the apiserver for ``seconds`` while ``waiting`` triggers wait in one triggerer.

    One job in ten fails (exit code 3, ``TerminateJob``), so both verdicts are checked. The
    jobs run through the outage and end after it; then every trigger's outcome is compared
    with its job's real phase, and the jobs are counted (the outage must delete none).
    """
    namespace = cluster.create_namespace("bench-outage")
    duration = OUTAGE_SETUP_S + OUTAGE_SETUP_PER_JOB_S * waiting + seconds
    names = [f"out-{i:04d}" for i in range(waiting)]
    bodies = [
        managed_job(n, duration, run_id=namespace, index=i, exit_code=3 if i % 10 == 9 else 0)
        for i, n in enumerate(names)
    ]
    say(f"outage: {waiting} jobs in {namespace}, each running {duration:.0f} s")
    cluster.create_jobs(namespace, bodies)
    cluster.wait_phase(namespace, waiting, {"Running"}, timeout=600, say=say)
    uids = {
        j["metadata"]["name"]: j["metadata"]["uid"]
        for j in cluster.list_jobs(namespace, MANAGED_SELECTOR)
    }
    jobs_file = work / "outage-jobs.json"
    jobs_file.write_text(json.dumps([{"name": n, "uid": u} for n, u in uids.items()]))
    out = work / "outage.json"
    proc = driver(
        "latency", "watch", 0, namespace, jobs_file, out, env,
        timeout=duration + 600, wait_go=True,
    )  # fmt: skip
    wait_for_line(proc, "READY")
    proc.stdin.write("go\n")
    proc.stdin.close()
    wait_for_line(proc, "SYNCED")
    threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep the pipe drained
    time.sleep(5)  # the triggers settle on the synced watch
    say(f"outage: kube-apiserver down for {seconds:.0f} s")
    down, ready = take_apiserver_down(cluster, seconds)
    say(f"outage: apiserver ready again after {ready - down:.0f} s; waiting for the verdicts")
    proc.wait(duration + 700)
    result = json.loads(out.read_text())
    jobs = cluster.list_jobs(namespace)
    verdicts = judge_verdicts(result["events"], jobs, uids)
    calls = result["api_calls"]
    backoff = result["backoff"]
    relists = [t for t, v in calls if v == "watch" and t > ready]
    cluster.delete_namespace(namespace)
    return {
        "seconds": round(ready - down, 1),
        "waiting": waiting,
        "list_requests": calls_between(calls, "list", down, ready),
        "watch_requests": calls_between(calls, "watch", down, ready),
        "wrong_verdicts": len(verdicts["wrong"]),
        "jobs_deleted": verdicts["deleted"],
        "planned_s": seconds,
        "max_list_requests": max_attempts(ready - down, backoff["initial"], backoff["max"]),
        "get_requests": calls_between(calls, "get", down, ready),
        "delete_requests": sum(1 for _, v in calls if v == "delete"),
        "watching_again_after_s": round(relists[0] - ready, 1) if relists else None,
        "missing_verdicts": verdicts["missing"],
        "outcomes": verdicts["outcomes"],
        "ended_before_outage": ended_before(jobs, down),
        "wrong_examples": verdicts["wrong"][:5],
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
    lines = [
        "# Benchmarks (latest run)",
        "",
        f"{r['meta']['date']}, {r['meta']['cpus']} CPUs, Python {r['meta']['python']}, "
        f"load average before: {r['meta']['load_before']}; total {r['meta']['total_s']:.0f} s. "
        "Reproduce: `make bench`."
        + (" Quick mode (smoke-test sizes)." if r["meta"].get("quick") else ""),
        "",
    ]
    # A section per scenario present: a partial run (--only) may lack some.
    sections = (
        ("completion_latency_s", md_latency),
        ("triggerer_scale", md_scale),
        ("submit_overhead_s", md_operator),
        ("render_ms", md_operator),
        ("e2e_overhead_s", md_e2e),
        ("namespace_scale", md_namespace),
        ("outage", md_outage),
        ("sweep_burst", md_sweep),
        ("live_progress", md_live_progress),
        ("odd_paths", md_odd_paths),
        ("handover", md_handover),
        ("e2e_real_airflow", md_e2e_real_airflow),
        ("resume", md_resume),
    )
    shown: set = set()
    for key, section in sections:
        if key in r and section not in shown:
            shown.add(section)
            lines += [*section(r), ""]
    lines += ["## Goals", ""]
    lines += [f"- {g}" for g in r["goals"]]
    return "\n".join(lines) + "\n"


def md_latency(r: dict) -> list[str]:
    lat = r["completion_latency_s"]
    lines = [
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
    ]
    return lines


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


def md_operator(r: dict) -> list[str]:
    """Submit overhead (the e2e scenario) and render time (render): either may be absent."""
    lines = ["## 3. Operator overhead", ""]
    if "submit_overhead_s" in r:
        submit = r["submit_overhead_s"]
        lines.append(
            f"- `execute()` start to job created: median {submit['median']} s, "
            f"p99 {submit['p99']} s (n={submit['n']})."
        )
    if "render_ms" in r:
        lines.append(
            f"- `render_job`: seed {r['render_ms']['seed']} ms, 100 tasks "
            f"{r['render_ms']['tasks_100']} ms (median; bench/render_bench.py)."
        )
    return lines


def md_e2e(r: dict) -> list[str]:
    lines = [
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
    return lines


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
        f"start). Filling it took {n['jobs_created_s']} s.",
    ]


def md_outage(r: dict) -> list[str]:
    o = r["outage"]
    return [
        "## 6. kube-apiserver outage",
        "",
        f"kube-apiserver stopped for {o['seconds']} s (planned {o['planned_s']} s, to ready "
        f"again) while {o['waiting']} triggers waited in one TriggerRunner; the jobs ended "
        "after it (one in ten failing).",
        "",
        "| outage s | waiting | LIST attempts (backoff bound) | WATCH attempts | GETs | "
        "wrong verdicts | missing verdicts | jobs deleted | watching again after |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {o['seconds']} | {o['waiting']} | {o['list_requests']} "
        f"({o['max_list_requests']}) | {o['watch_requests']} | {o['get_requests']} | "
        f"{o['wrong_verdicts']} | {o['missing_verdicts']} | {o['jobs_deleted']} | "
        f"{o['watching_again_after_s']} s |",
        "",
        "Attempts are counted in the triggerer process, at the hook, from the stop to the "
        "apiserver's /readyz answering (the apiserver is not there to count them). The bound "
        "is what the watcher's backoff allows if every delay were its unjittered minimum. "
        f"Outcomes: {o['outcomes']}; jobs that ended before the outage began: "
        f"{o['ended_before_outage']}.",
    ]


# ---- 7. a sweep's burst ----------------------------------------------------------------


def status_count(text: str, code: str) -> float:
    """Every request the apiserver answered with ``code``, from /metrics."""
    return sum(
        value
        for _, labels, value in parse_metrics(text, {"apiserver_request_total"})
        if labels.get("code") == code
    )


def sweep_burst(cluster: Cluster, env: dict, work: Path, tasks: int, window: float) -> dict:
    """``tasks`` mapped task instances submit at once (``bench/sweep_burst.py``), then submit
    again as retries; then their wait, by the provider's trigger and by 2 s polling."""
    namespace = cluster.create_namespace("bench-sweep")
    out = work / "sweep-burst.json"
    throttled = status_count(cluster.metrics(), "429")
    say(f"sweep: {tasks} mapped tasks submit at once in {namespace}, then again as retries")
    subprocess.run(
        [
            PY,
            str(REPO / "bench" / "sweep_burst.py"),
            "--namespace",
            namespace,
            "--tasks",
            str(tasks),
            "--out",
            str(out),
        ],
        env=env,
        check=True,
    )
    http_429 = status_count(cluster.metrics(), "429") - throttled
    burst = json.loads(out.read_text())
    errors = [r["error"] for r in burst["first"] + burst["again"] if "error" in r]
    jobs = cluster.list_jobs(namespace, MANAGED_SELECTOR)
    per_index: dict[str, int] = {}
    for job in jobs:
        index = job["metadata"]["labels"][MAP_INDEX_LABEL]
        per_index[index] = per_index.get(index, 0) + 1
    reattached = sum(
        1
        for a, b in zip(burst["first"], burst["again"], strict=True)
        if a.get("uid") == b.get("uid")
    )
    names_file = work / "sweep-jobs.json"
    names_file.write_text(
        json.dumps([{"name": r["name"], "uid": r["uid"]} for r in burst["first"] if "uid" in r])
    )
    idle = background(cluster, "sweep")
    waits = [
        waiter_row(cluster, env, work, namespace, names_file, tasks, how, window, idle, "sweep")
        for how in (("provider", "watch", 0), ("poll_2s", "poll", 2))
    ]
    cluster.delete_namespace(namespace)
    submit = [r["submit_s"] for r in burst["first"] if "submit_s" in r]
    retry = [r["submit_s"] for r in burst["again"] if "submit_s" in r]
    return {
        "tasks": tasks,
        "submit_p50_s": round(percentile(submit, 50), 3),
        "submit_p99_s": round(percentile(submit, 99), 3),
        "retry_p50_s": round(percentile(retry, 50), 3),
        "jobs": len(jobs),
        "duplicates": sum(n - 1 for n in per_index.values()),
        "map_indexes_without_a_job": tasks - len(per_index),
        "retries_reattached": reattached,
        "errors": errors[:5],
        "http_429": round(http_429),
        "watch_connections": waits[0]["watch_connections"],
        "wait": waits,
    }


def fixed_name_retries_ok(cluster: Cluster, env: dict, work: Path) -> bool:
    """A retry under a fixed ``job_name`` replaces the job its failed try reported and
    succeeds (``bench/odd_paths.py fixed-name``), instead of being refused until the TTL."""
    namespace = cluster.create_namespace("bench-fixed-name")
    out = work / "fixed-name.json"
    script = str(REPO / "bench" / "odd_paths.py")
    subprocess.run(
        [PY, script, "fixed-name", "--namespace", namespace, "--out", str(out)],
        env=env,
        check=True,
    )
    result = json.loads(out.read_text())
    say(f"odd paths: fixed name retry: {result}")
    cluster.delete_namespace(namespace)
    return bool(result["ok"])


def md_sweep(r: dict) -> list[str]:
    b = r["sweep_burst"]
    rows = [
        f"| {w['waiter']} | {w['watch_connections']} | {w['requests_per_min']:,.0f} | "
        f"{w['cpu_s_per_min']:.2f} |"
        for w in b["wait"]
    ]
    return [
        "## 7. A sweep's burst",
        "",
        f"{b['tasks']} mapped task instances run `execute()` at once (threads of one process), "
        "then again as retries of the same try.",
        "",
        "| tasks | submit p50 | submit p99 | retry p50 | jobs | duplicates | retries reattached "
        "| HTTP 429 | errors |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {b['tasks']} | {b['submit_p50_s']} s | {b['submit_p99_s']} s | {b['retry_p50_s']} s "
        f"| {b['jobs']} | {b['duplicates']} | {b['retries_reattached']} | {b['http_429']} | "
        f"{len(b['errors'])} |",
        "",
        "Then the wait on those jobs, in one waiter process each:",
        "",
        "| waiter | watch connections | requests/min | CPU s/min |",
        "|---|---|---|---|",
        *rows,
    ]


def goals(r: dict) -> list[str]:
    out = []
    if "completion_latency_s" in r:
        w = r["completion_latency_s"]["watch"]
        ok = w["median"] is not None and w["median"] < 0.3 and w["p99"] < 1
        out.append(
            f"latency median < 0.3 s and p99 < 1 s: {'met' if ok else 'MISSED'} "
            f"(median {w['median']} s, p99 {w['p99']} s vs observer)"
        )
    out += namespace_goals(r.get("namespace_scale")) + outage_goals(r.get("outage"))
    out += handover_goals(r.get("handover"))
    out += e2e_real_airflow_goals(r.get("e2e_real_airflow"))
    prov = [x for x in r.get("triggerer_scale", []) if x["waiter"] == "provider"]
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


SCENARIOS = (
    "render",
    "e2e",
    "latency",
    "scale",
    "namespace_scale",
    "outage",
    "sweep_burst",
    "live_progress",
    "odd_paths",
    "handover",
    "e2e_real_airflow",
    "resume",
)


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster-dir", type=Path, required=True)
    parser.add_argument("--sizes", default="100,500,1000", help="triggerer scale N values")
    parser.add_argument("--latency-jobs", type=int, default=100)
    parser.add_argument("--e2e-runs", type=int, default=4, help="dag.test() runs per mode")
    parser.add_argument("--window", type=float, default=30.0, help="scale window (s)")
    parser.add_argument(
        "--namespace-jobs", type=int, default=10000, help="other owners' jobs beside ours"
    )
    parser.add_argument("--namespace-waiting", type=int, default=1000, help="waiting triggers")
    parser.add_argument("--outage-s", type=float, default=300.0, help="apiserver outage (s)")
    parser.add_argument("--outage-waiting", type=int, default=1000, help="triggers waiting")
    parser.add_argument("--sweep-tasks", type=int, default=200, help="mapped tasks at once")
    parser.add_argument("--live-jobs", type=int, default=100, help="jobs followed (or not)")
    parser.add_argument("--live-lines", type=int, default=200, help="log lines per master")
    parser.add_argument("--live-runs", type=int, default=3, help="runs per side, for medians")
    parser.add_argument("--handover-jobs", type=int, default=20, help="deferred jobs handed over")
    parser.add_argument(
        "--e2e-real-tasks", type=int, default=50, help="deferred tasks through the real Airflow"
    )
    parser.add_argument("--e2e-real-wave", type=int, default=10, help="tasks started together")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help=f"comma-separated subset of {SCENARIOS}"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="where latest.json/md go; a partial run (--only) merges into what is there",
    )
    parser.add_argument("--keep-work", action="store_true", help="keep the raw files")
    parser.add_argument(
        "--report-only", action="store_true", help="re-render latest.md from latest.json"
    )
    options = parser.parse_args()
    if options.quick:
        options.sizes, options.latency_jobs, options.e2e_runs, options.window = "20,50", 20, 1, 10
        options.namespace_jobs, options.namespace_waiting = 200, 20
        options.outage_s, options.outage_waiting = 20.0, 20
        options.sweep_tasks = 10
        options.live_jobs, options.live_runs = 20, 1
        options.handover_jobs = 4
        options.e2e_real_tasks, options.e2e_real_wave = 6, 6
    options.only = set(options.only.split(","))
    unknown = options.only - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {SCENARIOS}")
    return options


def run_scenarios(options, cluster: Cluster, env: dict, work: Path, results: dict) -> None:
    sizes = [int(s) for s in options.sizes.split(",")]
    if "render" in options.only:
        say("render_job")
        results["render_ms"] = render(repeat=500)
    # render needs no Airflow DB; handover and e2e_real_airflow start an Airflow of their own.
    # resume runs the trainer as local processes: no Airflow, no cluster.
    if options.only - {"render", "handover", "e2e_real_airflow", "resume"}:
        say("airflow db migrate")
        subprocess.run(
            [PY, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True
        )
    if "e2e" in options.only:
        e2e = end_to_end(cluster, env, work, options.e2e_runs)
        results["submit_overhead_s"] = e2e["submit_overhead_s"]
        results["e2e_overhead_s"] = e2e["e2e"]
        results["e2e_sim_duration_s"] = e2e["sim_duration_s"]
    if "latency" in options.only:
        results["completion_latency_s"] = latency_figures(
            completion_latency(cluster, env, work, options.latency_jobs)
        )
    if "scale" in options.only:
        scale = triggerer_scale(cluster, env, work, sizes, options.window)
        results["triggerer_scale"] = scale.pop("rows")
        results["scale_meta"] = scale
    if "namespace_scale" in options.only:
        ns = namespace_scale(
            cluster, env, work, options.namespace_jobs, options.namespace_waiting, options.window
        )
        results["namespace_scale"] = ns
        say(f"namespace: {ns}")
    if "sweep_burst" in options.only:
        results["sweep_burst"] = sweep_burst(
            cluster, env, work, options.sweep_tasks, options.window
        )
        say(f"sweep: {results['sweep_burst']}")
    if "live_progress" in options.only:
        results["live_progress"] = live_progress(
            cluster,
            env,
            work,
            driver,
            say,
            jobs=options.live_jobs,
            lines=options.live_lines,
            window=options.window,
            runs=options.live_runs,
        )
        say(f"live_progress: {results['live_progress']}")
    if "outage" in options.only:
        results["outage"] = outage(cluster, env, work, options.outage_waiting, options.outage_s)
        say(f"outage: {results['outage']}")
    if "odd_paths" in options.only:
        results["odd_paths"] = odd_paths(cluster, env, work, options.quick)
        say(f"odd_paths: {results['odd_paths']}")
    if "handover" in options.only:
        results["handover"] = handover(options.cluster_dir, options.handover_jobs, say)
        say(f"handover: {results['handover']}")
    if "e2e_real_airflow" in options.only:
        results["e2e_real_airflow"] = e2e_real_airflow(
            options.cluster_dir, options.e2e_real_tasks, options.e2e_real_wave, say
        )
        say(f"e2e_real_airflow: {results['e2e_real_airflow']}")
    if "resume" in options.only:
        results["resume"] = resume(
            work, train_s=5 if options.quick else 20, repeat=1 if options.quick else 3
        )
        say(f"resume: {results['resume']}")


def resume(work: Path, train_s: float, repeat: int) -> dict:
    """The example trainer stopped as a preempted pod is and resumed on its run's checkpoints,
    on a volume and in a W&B artifact side by side, measured by ``bench/resume_bench.py`` in a
    child process."""
    out = work / "resume.json"
    argv = [PY, str(REPO / "bench" / "resume_bench.py"), "--train-s", str(train_s)]
    argv += ["--repeat", str(repeat)]
    subprocess.run([*argv, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def md_resume(r: dict) -> list[str]:
    o = r["resume"]
    return [
        "## Resume on the same run",
        "",
        f"The example trainer (2 local ranks over gloo) trained {o['train_s']} s, its worker got "
        f"SIGTERM (a preempted pod): it stopped after step {o['steps_before_kill']} and saved "
        f"it; the next try's job on the same run resumed from step {o['resumed_from_step']} "
        f"(`steps_repeated` {o['steps_repeated']}) {o['resume_overhead_s']} s after the SIGTERM "
        "(stop, save, new processes, torch import, rendezvous, load; a cluster's scheduling, "
        "image start and `retry_delay` come on top). Without resume the next try starts from "
        "step 0: every step before the stop is trained again."
        + (
            f" The checkpoint held {o['saved_training_s']} s of training: "
            f"{o['saved_gpu_seconds']} GPU-seconds saved, as if each rank held one GPU."
            if "saved_gpu_seconds" in o
            else ""
        )
        + (
            f" With the checkpoints in a W&B artifact instead (no shared volume; the W&B "
            f"stand-in on this machine, so no upload time): resumed from step "
            f"{o['artifact']['resumed_from_step']} {o['artifact']['resume_overhead_s']} s after "
            f"the SIGTERM, {o['artifact_overhead_ratio']}x the volume's (medians of "
            f"{o['repeat']} runs each, in turns)."
            if "artifact" in o
            else ""
        ),
    ]


def odd_paths(cluster: Cluster, env: dict, work: Path, quick: bool) -> dict:
    """Each odd path's figure, measured by ``bench/odd_paths.py`` in a child process each."""
    restart = odd_path(
        cluster, env, work, "restart-false-timeouts", "--restarts", "5" if quick else "20"
    )
    crash = odd_path(cluster, env, work, "crash-loop")
    return {
        "restart_false_timeouts": restart["restart_false_timeouts"],
        "restart_run": restart,
        "crash_loop_detect_s": crash["crash_loop_detect_s"],
        "crash_loop_run": crash,
        "fixed_name_retries_ok": fixed_name_retries_ok(cluster, env, work),
    }


def odd_path(cluster: Cluster, env: dict, work: Path, scenario: str, *args: str) -> dict:
    out = work / f"odd-{scenario}.json"
    argv = [PY, str(REPO / "bench" / "odd_paths.py"), scenario, *args]
    argv += ["--cluster-dir", str(cluster.state_dir), "--out", str(out)]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def md_odd_paths(r: dict) -> list[str]:
    o = r["odd_paths"]
    lines = ["## Odd paths", ""]
    if "restart_false_timeouts" in o:
        run = o["restart_run"]
        lines.append(
            f"- `restart_false_timeouts`: {o['restart_false_timeouts']} pending timeouts of "
            f"{run['jobs']} jobs whose gang was whole, over {run['restarts']} restarts of every "
            f"trigger with {run['evictions']} workers evicted and kept unplaceable meanwhile "
            f"(`pending_timeout` {run['pending_timeout_s']} s)."
        )
    if "fixed_name_retries_ok" in o:
        lines.append(
            f"- `fixed_name_retries_ok`: {o['fixed_name_retries_ok']} (a retry under a fixed "
            "`job_name` after a failed, reported try replaces that job and succeeds)."
        )
    if "crash_loop_detect_s" in o:
        run = o["crash_loop_run"]
        lines.append(
            f"- `crash_loop_detect_s`: {o['crash_loop_detect_s']} s from a seed master's first "
            "crash under `restartPolicy: OnFailure` to its deferred task's end "
            f"({run['task_state']}, default `max_container_restarts` "
            f"{run['max_container_restarts']}; the simulated kubelet restarts without back-off)."
        )
    return lines


def latency_figures(lat: dict) -> dict:
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
    say(
        f"latency: watch {latency['watch']}, poll_2s {latency['poll_2s']['median']}, "
        f"poll_10s {latency['poll_10s']['median']}"
    )
    return latency


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


def outage_goals(o: dict | None) -> list[str]:
    if not o:
        return []
    bounded = o["list_requests"] <= o["max_list_requests"]
    right = o["wrong_verdicts"] == 0 and o["missing_verdicts"] == 0
    return [
        f"no request storm in a {o['seconds']} s apiserver outage: "
        f"{'met' if bounded else 'MISSED'} ({o['list_requests']} LIST attempts, backoff "
        f"allows {o['max_list_requests']}; {o['watch_requests']} WATCH, "
        f"{o['get_requests']} GET)",
        f"every verdict right after it: {'met' if right else 'MISSED'} "
        f"({o['wrong_verdicts']} wrong, {o['missing_verdicts']} missing of {o['waiting']})",
        f"no job deleted: {'met' if o['jobs_deleted'] == 0 else 'MISSED'} "
        f"({o['jobs_deleted']} gone, {o['delete_requests']} delete calls)",
    ]


def main() -> None:
    options = parse_options()
    out_dir = options.results
    if options.report_only:
        (out_dir / "latest.md").write_text(
            markdown(json.loads((out_dir / "latest.json").read_text()))
        )
        return
    cluster = Cluster(options.cluster_dir)
    work = Path(tempfile.mkdtemp(prefix="avw-bench-"))
    home = work / "airflow"
    shutil.copytree(REPO / "dags", home / "dags", dirs_exist_ok=True)
    shutil.copytree(REPO / "tests" / "dags", home / "dags", dirs_exist_ok=True)
    env = airflow_env(home, cluster.kubeconfig)
    load_before = round(os.getloadavg()[0], 2)
    say(f"work dir {work}; cluster {cluster.server}")
    pods = max(int(s) for s in options.sizes.split(",")) + options.latency_jobs
    added = cluster.ensure_pod_capacity(max(pods, options.outage_waiting, options.live_jobs) + 50)
    if added:
        say(f"added {len(added)} simulated nodes for capacity")
    # A partial run keeps the figures of the scenarios it did not run.
    previous = out_dir / "latest.json"
    partial = set(SCENARIOS) - options.only
    results: dict[str, Any] = (
        json.loads(previous.read_text()) if partial and previous.exists() else {}
    )
    try:
        run_scenarios(options, cluster, env, work, results)
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
        "scenarios": sorted(options.only),
    }
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "latest.md").write_text(markdown(results))
    print(markdown(results))
    say(f"wrote {out_dir}/latest.json and latest.md")


if __name__ == "__main__":
    main()

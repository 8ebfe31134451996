"""6. An apiserver outage: kube-apiserver stopped while triggers wait in one triggerer;
LIST/WATCH attempts counted against the backoff's bound, then every verdict checked against
the job's real end, and no job deleted."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter

from common import Cluster, managed_job, parse_k8s_time, phase, say, table
from waiters import driver, wait_for_line

from airflow_volcano_wandb.job.endings import Ending
from test_support.faults import start_component, stop_component, wait_apiserver_ready

KEYS = ("outage",)
NEEDS = "db"
OPTIONS = {
    "outage_s": (300.0, 20.0, "apiserver outage (s)"),
    "outage_waiting": (1000, 20, "triggers waiting"),
}

# How long the jobs may still be starting up (Running, the driver importing and syncing):
# they run this plus the outage, so they end after it (ended_before_outage counts others).
OUTAGE_SETUP_S = 90.0
OUTAGE_SETUP_PER_JOB_S = 0.2


def expected_outcome(phase: str) -> str | None:
    """The verdict a job's real end calls for; None while it has not ended."""
    if phase == "Completed":
        return "succeeded"
    return "failed" if phase in Ending.FAILED.row.phases else None


def max_attempts(seconds: float, initial: float, cap: float) -> int:
    """The most list attempts the watcher's backoff allows in ``seconds`` of failures: each
    delay is at least the unjittered ``initial * 2**k`` capped at ``cap``."""
    attempts, elapsed, delay = 1, 0.0, initial
    while elapsed + delay <= seconds:
        elapsed += delay
        attempts += 1
        delay = min(delay * 2, cap)
    return attempts


def take_apiserver_down(cluster: Cluster, seconds: float) -> tuple[float, float]:
    """Stop kube-apiserver for ``seconds``, start it again (whatever happens); return (down,
    ready) wall times."""
    down = time.time()
    argv = stop_component(cluster.state_dir, "kube-apiserver")
    try:
        time.sleep(max(0.0, down + seconds - time.time()))
    finally:
        start_component(cluster.state_dir, "kube-apiserver", argv)
        wait_apiserver_ready(cluster.state_dir, timeout=180)
    return down, time.time()


def calls_by_verb(calls: list, start: float, end: float) -> dict[str, int]:
    """The hook's calls from ``start`` to ``end`` by verb (``trigger_driver._count_calls``)."""
    return dict(sorted(Counter(v for t, v in calls if start <= t <= end).items()))


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
        outcome, ended = fired.get(name), phase(job)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        if outcome is None:
            missing += 1
        elif outcome != expected_outcome(ended):
            wrong.append(f"{name}: {outcome} but the job is {ended or 'without a phase'}")
    return {"wrong": wrong, "missing": missing, "deleted": deleted, "outcomes": outcomes}


def ended_before(jobs: list[dict], when: float) -> int:
    """Jobs whose last transition (their end, for ended jobs) came before ``when``."""
    ends = [
        parse_k8s_time(j["status"]["state"].get("lastTransitionTime"))
        for j in jobs
        if expected_outcome(phase(j))
    ]
    return sum(1 for end in ends if end and end < when)


def pods(o) -> int:
    return 3 * o.outage_waiting


def run(ctx) -> dict:
    """The triggers at the operator's defaults, each job of 3 pods (so the pods' reads, or the
    pod watch, are in play through the outage); one job in ten fails (exit code 3), so both
    verdicts are checked once the jobs end, after the outage."""
    cluster, work, waiting, seconds = ctx.cluster, ctx.work, ctx.outage_waiting, ctx.outage_s
    namespace = cluster.create_namespace("bench-outage")
    duration = OUTAGE_SETUP_S + OUTAGE_SETUP_PER_JOB_S * waiting + seconds
    names = [f"out-{i:04d}" for i in range(waiting)]
    bodies = [
        managed_job(
            n, duration, run_id=namespace, index=i, exit_code=3 if i % 10 == 9 else 0, workers=2
        )
        for i, n in enumerate(names)
    ]
    say(f"outage: {waiting} jobs of 3 pods in {namespace}, each running {duration:.0f} s")
    started = cluster.start_jobs(namespace, bodies)["jobs"]
    uids = {job["name"]: job["uid"] for job in started}
    jobs_file = work / "outage-jobs.json"
    jobs_file.write_text(json.dumps(started))
    out = work / "outage.json"
    proc = driver(
        "latency", "operator", 0, namespace, jobs_file, out, ctx.env,
        timeout=duration + 600, wait_go=True
    )  # fmt: skip
    wait_for_line(proc, "READY")
    proc.stdin.write("go\n")
    proc.stdin.close()
    wait_for_line(proc, "SYNCED")
    # Keep the pipe drained, into a file: the runner logs a trigger's error there.
    driver_log = work / "outage-driver.log"
    threading.Thread(target=lambda: driver_log.write_text(proc.stdout.read()), daemon=True).start()
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
    during = calls_by_verb(calls, down, ready)
    cluster.delete_namespace(namespace)
    o = {"seconds": round(ready - down, 1), "waiting": waiting}
    o |= {"list_requests": during.get("list", 0), "watch_requests": during.get("watch", 0)}
    o |= {"wrong_verdicts": len(verdicts["wrong"]), "jobs_deleted": verdicts["deleted"]}
    o["planned_s"] = seconds
    o["max_list_requests"] = max_attempts(ready - down, backoff["initial"], backoff["max"])
    o |= {"get_requests": during.get("get", 0), "pod_list_requests": during.get("list_pods", 0)}
    o["pod_watch_env"] = result.get("pod_watch_env")
    o["trigger"] = "operator defaults; jobs of 3 pods (master 1 + worker 2), Running"
    o["delete_requests"] = sum(1 for _, v in calls if v == "delete")
    o["watching_again_after_s"] = round(relists[0] - ready, 1) if relists else None
    o |= {"missing_verdicts": verdicts["missing"], "outcomes": verdicts["outcomes"]}
    o |= {"ended_before_outage": ended_before(jobs, down), "wrong_examples": verdicts["wrong"][:5]}
    o["failed_triggers"] = result.get("failed_triggers", [])[:5]
    o["cancelled_triggers"] = len(result.get("cancelled_triggers", []))
    o["awaiting"] = result.get("awaiting", {})
    # Before: the triggers' start, first sync and settle; after: from the apiserver's return
    # to the last verdict (the relists and the confirming reads).
    o |= {"calls_before": calls_by_verb(calls, 0.0, down), "calls_during": during}
    return {"outage": {**o, "calls_after": calls_by_verb(calls, ready, float("inf"))}}


def section(r: dict) -> list[str]:
    o = r["outage"]
    head = "outage s | waiting | LIST attempts (backoff bound) | WATCH attempts | GETs | pod LISTs"
    head += " | wrong verdicts | missing verdicts | jobs deleted | watching again after"
    row = [o["seconds"], o["waiting"], f"{o['list_requests']} ({o['max_list_requests']})"]
    row += [o[k] for k in ("watch_requests", "get_requests", "pod_list_requests")]
    row += [o[k] for k in ("wrong_verdicts", "missing_verdicts", "jobs_deleted")]
    return [
        f"kube-apiserver stopped for {o['seconds']} s (planned {o['planned_s']} s, to ready "
        f"again) while {o['waiting']} triggers waited in one TriggerRunner; the jobs ended "
        "after it (one in ten failing). The triggers were the operator's at its defaults, each "
        "job 3 pods Running.",
        "",
        *table(head, [*row, f"{o['watching_again_after_s']} s"]),
        "",
        "Attempts are counted in the triggerer process, at the hook, from the stop to the "
        "apiserver's /readyz answering (the apiserver is not there to count them). The bound "
        "is what the watcher's backoff allows if every delay were its unjittered minimum. "
        f"Outcomes: {o['outcomes']}; jobs that ended before the outage began: "
        f"{o['ended_before_outage']}. Calls by verb during the outage: {o['calls_during']}; "
        f"after it: {o['calls_after']}.",
    ]


def goals(o: dict | None) -> list[str]:
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

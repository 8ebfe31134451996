"""3 and 4. The operator's overhead (``execute()`` start to job created; ``render_job``, by
``render_bench.py``) and the end-to-end overhead under ``dag.test()``, sync vs deferrable
(``e2e_bench.py``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from common import PY, REPO, RESULTS, Cluster, say, summary
from waiters import Observer


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

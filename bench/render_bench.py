"""3. ``render_job`` on the seed template and on a 100-task template: median (and p90, min, CPU)
time per call of each case, printed and written as JSON (``--out``, by default
``bench/results/render.json``). The ``render`` scenario runs this file as a program with
``--repeat 500``. Figures, not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from common import RESULTS, SEED, child

from airflow_volcano_wandb.template import render_job
from test_support import template_cases

KEYS = ("render_ms",)
MACROS = {**template_cases.MACROS, "epochs": 3}
#: Every call's: the seed names its namespace, honoured only when allowed.
RENDER = {"macros": MACROS, "template_namespace_allowed": True}
# What the operator passes on a typical run.
KEY = {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}}
OVERRIDES: dict[str, Any] = {
    "replicas": {"worker": "3"},
    "env": [{"name": "WANDB_RUN_ID", "value": "k3x9p2qa"}, KEY],
    "allowed_secrets": ["wandb"],  # the key's Secret, named in env above
    "labels": {"airflow.apache.org/dag-id": "retrain"},
    "pod_annotations": {"sim.airflow-volcano-wandb.io/duration": "5s"},
}


def run(ctx) -> dict:
    out = ctx.work / "render.json"
    results = child("render_bench.py", "--repeat", 500, out=out)["results"]
    return {
        "render_ms": {
            "seed": round(results["seed (dict) + overrides"]["median_ms"], 3),
            "tasks_100": round(results["100 tasks (dict) + overrides"]["median_ms"], 3),
            "cases": {k: round(v["median_ms"], 3) for k, v in results.items()},
        }
    }


def section(r: dict) -> list[str]:
    """Submit overhead (the e2e scenario) and render time (render): either may be absent."""
    said = {
        "submit_overhead_s": lambda s: (
            f"- `execute()` start to job created: median {s['median']} s, p99 {s['p99']} s "
            f"(n={s['n']})."
        ),
        "render_ms": lambda ms: (
            f"- `render_job`: seed {ms['seed']} ms, 100 tasks {ms['tasks_100']} ms (median; "
            "bench/render_bench.py)."
        ),
    }
    return [line(r[key]) for key, line in said.items() if key in r]


def hundred_task_template() -> dict[str, Any]:
    """The seed's master and worker plus 98 more tasks, each with env, resources and macros."""
    template = yaml.safe_load(SEED.read_text())
    worker = template["spec"]["tasks"][1]
    for i in range(98):
        task = copy.deepcopy(worker)
        task["name"] = f"shard-{i}"
        container = task["template"]["spec"]["containers"][0]
        container["name"] = f"shard-{i}"
        container["args"] = ["--shard", str(i), "--epochs=${epochs}", "--run=${run_id}"]
        container["env"] = [
            {"name": "WANDB_PROJECT", "value": "${project_name}"},
            {"name": "SHARD", "value": str(i)},
        ]
        container["resources"] = {"limits": {"cpu": "2", "memory": "4Gi"}}
        template["spec"]["tasks"].append(task)
    return template


def measure(call: Callable[[], object], repeat: int) -> dict[str, float]:
    for _ in range(max(repeat // 20, 5)):  # warm caches (regexes, imports) first
        call()
    samples, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        call()
        samples.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    samples.sort()
    return {
        "median_ms": statistics.median(samples) * 1e3,
        "p90_ms": samples[int(len(samples) * 0.9)] * 1e3,
        "min_ms": samples[0] * 1e3,
        # CPU time of this process: what the call costs without the other processes' share.
        "cpu_median_ms": statistics.median(cpu) * 1e3,
        "repeat": repeat,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000, help="calls per case (seed)")
    parser.add_argument("--out", type=Path, default=RESULTS / "render.json")
    options = parser.parse_args()
    one, hundred = options.repeat, max(options.repeat // 10, 50)
    seed, big = yaml.safe_load(SEED.read_text()), hundred_task_template()
    cases = {  # name: (template, overrides, calls)
        "seed (dict)": (seed, {}, one),
        "seed (dict) + overrides": (seed, OVERRIDES, one),
        "seed (YAML file)": (SEED, {}, one),
        "seed (YAML string)": (SEED.read_text(), {}, one),
        "100 tasks (dict) + overrides": (big, OVERRIDES, hundred),
        "100 tasks (YAML string) + overrides": (yaml.safe_dump(big), OVERRIDES, hundred),
    }
    results = {
        name: measure(lambda t=template, o=overrides: render_job(t, **RENDER, **o), n)
        for name, (template, overrides, n) in cases.items()
    }
    width = max(map(len, results))
    print(f"{'case':<{width}}  {'median':>9}  {'p90':>9}  {'min':>9}  {'cpu med':>9}  calls")
    for name, r in results.items():
        times = (r[k] for k in ("median_ms", "p90_ms", "min_ms", "cpu_median_ms"))
        print(f"{name:<{width}}  " + "  ".join(f"{t:>7.3f}ms" for t in times) + f"  {r['repeat']}")
    load = round(os.getloadavg()[0], 2)
    print(f"load average (1 min) {load:.2f} on {os.cpu_count()} CPUs")
    machine = {"python": platform.python_version(), "machine": platform.machine()}
    machine["pyyaml_libyaml"] = bool(getattr(yaml, "__with_libyaml__", False))
    # Figures are wall time: a busy machine inflates them, so record how busy it was.
    machine |= {"cpus": os.cpu_count(), "load_average_1m": load}
    options.out.parent.mkdir(parents=True, exist_ok=True)
    options.out.write_text(json.dumps({**machine, "results": results}, indent=2) + "\n")
    print(f"wrote {options.out}")


if __name__ == "__main__":
    main()

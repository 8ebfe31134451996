"""3. ``render_job`` on the seed template and on a 100-task template (the ``render`` scenario:
``run`` runs this file as a program, in a child process, with ``--repeat 500``).

Prints median (and p90/min) wall time per call and writes the figures to
``bench/results/render.json``. Run: ``python bench/render_bench.py [--repeat N]``.
This is a script that reports figures, not a test: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from airflow_volcano_wandb.template import render_job  # noqa: E402
from test_support import template_cases  # noqa: E402

SEED_PATH = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"
RESULTS = REPO / "bench" / "results" / "render.json"
KEYS = ("render_ms",)
MACROS = {**template_cases.MACROS, "epochs": 3}
# What the operator passes on a typical run.
OVERRIDES: dict[str, Any] = {
    "replicas": {"worker": "3"},
    "env": [
        {"name": "WANDB_RUN_ID", "value": "k3x9p2qa"},
        {
            "name": "WANDB_API_KEY",
            "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
        },
    ],
    "allowed_secrets": ["wandb"],  # the key's Secret, named in env above
    "labels": {"airflow.apache.org/dag-id": "retrain"},
    "pod_annotations": {"sim.airflow-volcano-wandb.io/duration": "5s"},
}


def run(ctx) -> dict:
    subprocess.run([sys.executable, __file__, "--repeat", "500"], check=True)
    results = json.loads(RESULTS.read_text())["results"]
    return {
        "render_ms": {
            "seed": round(results["seed (dict) + overrides"]["median_ms"], 3),
            "tasks_100": round(results["100 tasks (dict) + overrides"]["median_ms"], 3),
            "cases": {k: round(v["median_ms"], 3) for k, v in results.items()},
        }
    }


def section(r: dict) -> list[str]:
    """Submit overhead (the e2e scenario) and render time (render): either may be absent."""
    lines: list[str] = []
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


def hundred_task_template() -> dict[str, Any]:
    """The seed's master and worker plus 98 more tasks, each with env, resources and macros."""
    template = yaml.safe_load(SEED_PATH.read_text())
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
    assert len(template["spec"]["tasks"]) == 100
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
    options = parser.parse_args()
    seed_dict = yaml.safe_load(SEED_PATH.read_text())
    seed_text = SEED_PATH.read_text()
    big = hundred_task_template()
    big_text = yaml.safe_dump(big)
    big_repeat = max(options.repeat // 10, 50)

    cases = {
        "seed (dict)": (lambda: render_job(seed_dict, macros=MACROS), options.repeat),
        "seed (dict) + overrides": (
            lambda: render_job(seed_dict, macros=MACROS, **OVERRIDES),
            options.repeat,
        ),
        "seed (YAML file)": (lambda: render_job(SEED_PATH, macros=MACROS), options.repeat),
        "seed (YAML string)": (lambda: render_job(seed_text, macros=MACROS), options.repeat),
        "100 tasks (dict) + overrides": (
            lambda: render_job(big, macros=MACROS, **OVERRIDES),
            big_repeat,
        ),
        "100 tasks (YAML string) + overrides": (
            lambda: render_job(big_text, macros=MACROS, **OVERRIDES),
            big_repeat,
        ),
    }
    results = {name: measure(call, repeat) for name, (call, repeat) in cases.items()}

    width = max(map(len, results))
    print(f"{'case':<{width}}  {'median':>9}  {'p90':>9}  {'min':>9}  {'cpu med':>9}  calls")
    for name, r in results.items():
        print(
            f"{name:<{width}}  {r['median_ms']:>7.3f}ms  {r['p90_ms']:>7.3f}ms  "
            f"{r['min_ms']:>7.3f}ms  {r['cpu_median_ms']:>7.3f}ms  {r['repeat']}"
        )
    print(f"load average (1 min) {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "python": platform.python_version(),
                "machine": platform.machine(),
                "pyyaml_libyaml": bool(getattr(yaml, "__with_libyaml__", False)),
                # Figures are wall time: a busy machine inflates them, so record how busy it was.
                "cpus": os.cpu_count(),
                "load_average_1m": round(os.getloadavg()[0], 2),
                "results": results,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {RESULTS.relative_to(REPO)}")


if __name__ == "__main__":
    main()

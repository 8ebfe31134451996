"""The results file, ``bench/results/latest.{json,md}``: the latest figures of every scenario,
each with the date and machine load of its own run.

Every writer goes through :func:`record`: ``run_all.py`` after each scenario it runs, and the
scripts that measure a scenario on their own (``resume_bench.py``, ``odd_paths.py``,
``real_pods.py``, ``handover.py`` with ``--record``). A scenario's figures replace that
scenario's only; the others keep theirs, with their own dates, under ``scenario_meta``.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

from common import REPO, RESULTS

#: The keys of ``latest.json`` each scenario writes.
SCENARIO_KEYS: dict[str, tuple[str, ...]] = {
    "render": ("render_ms",),
    "e2e": ("submit_overhead_s", "e2e_overhead_s", "e2e_sim_duration_s"),
    "latency": ("completion_latency_s",),
    "scale": ("triggerer_scale", "scale_meta"),
    "namespace_scale": ("namespace_scale",),
    "outage": ("outage",),
    "sweep_burst": ("sweep_burst",),
    "live_progress": ("live_progress",),
    "odd_paths": ("odd_paths",),
    "handover": ("handover",),
    "e2e_real_airflow": ("e2e_real_airflow",),
    "resume": ("resume",),
    "real_pods": ("real_pods",),
    "pod_cache": ("pod_cache",),
    "parse_light": ("parse_light",),
}


def load_before() -> float:
    """The 1-minute load average now: taken just before a scenario runs."""
    return round(os.getloadavg()[0], 2)


def commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def scenario_meta(load: float, *, quick: bool = False, how: str = "", **extra: Any) -> dict:
    """The date (now: when the scenario ended), the machine and its load before the scenario
    ran, the code's commit and how it was run."""
    meta = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "load_before": load,
        "quick": quick,
        "commit": commit(),
    }
    if how:
        meta["how"] = how
    return {**meta, **extra}


def read(out_dir: Path = RESULTS) -> dict[str, Any]:
    path = out_dir / "latest.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write(results: dict[str, Any], out_dir: Path = RESULTS) -> None:
    """Both files, the goals and the report computed again from every scenario's figures."""
    from report import goals, markdown

    results["goals"] = goals(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "latest.md").write_text(markdown(results))


def record(
    scenario: str, figures: dict[str, Any], meta: dict[str, Any], out_dir: Path = RESULTS
) -> dict[str, Any]:
    """Put one scenario's ``figures`` (its keys of ``SCENARIO_KEYS``) and ``meta`` into the
    results file in ``out_dir``, keeping every other scenario's; return the whole."""
    unknown = set(figures) - set(SCENARIO_KEYS[scenario])
    if unknown:
        raise ValueError(f"{scenario} writes {SCENARIO_KEYS[scenario]}, not {sorted(unknown)}")
    results = read(out_dir)
    results.update(figures)
    results.setdefault("scenario_meta", {})[scenario] = meta
    results.setdefault("meta", {})
    results["meta"].update(last_written=meta["date"], cpus=meta["cpus"], python=meta["python"])
    write(results, out_dir)
    return results


def record_part(
    scenario: str, part: str, figures: dict[str, Any], meta: dict[str, Any], out_dir: Path
) -> dict[str, Any]:
    """Merge the figures of one ``part`` of a scenario (one of ``odd_paths.py``'s) into that
    scenario's, keeping its other parts'; the scenario's meta says which part is of which
    date (``parts``)."""
    results = read(out_dir)
    merged = {**results.get(scenario, {}), **figures}
    previous = results.get("scenario_meta", {}).get(scenario, {})
    parts = {**previous.get("parts", {}), part: meta["date"]}
    return record(scenario, {scenario: merged}, {**meta, "parts": parts}, out_dir)


def add_record_option(parser: Any) -> None:
    """``--record [DIR]``: also write the figures into DIR/latest.json (bench/results)."""
    parser.add_argument(
        "--record",
        type=Path,
        nargs="?",
        const=RESULTS,
        help=f"also write the figures into DIR/latest.{{json,md}} (default DIR: {RESULTS})",
    )


def present(results: dict[str, Any]) -> list[str]:
    """The scenarios whose figures the results hold, in the runner's order."""
    return [s for s, keys in SCENARIO_KEYS.items() if any(k in results for k in keys)]

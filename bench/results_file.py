"""The results file, ``bench/results/latest.{json,md}``: the latest figures of every scenario,
each with the date and load of its own run. Every writer goes through :func:`record`
(``run_all.py``, an odd path's ``--record``): a scenario's figures replace its own only.
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
from report import SCENARIOS, goals, markdown


def load_before() -> float:
    """The 1-minute load average now: taken just before a scenario runs."""
    return round(os.getloadavg()[0], 2)


def commit() -> str | None:
    argv = ["git", "rev-parse", "--short", "HEAD"]
    try:
        out = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.strip() or None


def scenario_meta(load: float, *, quick: bool = False, how: str = "", **extra: Any) -> dict:
    """The date (now: when the scenario ended), the machine and its load before the scenario
    ran, the code's commit and how it was run."""
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}
    meta |= {"python": platform.python_version(), "load_before": load, "quick": quick}
    return {**meta, "commit": commit(), **({"how": how} if how else {}), **extra}


def read(out_dir: Path = RESULTS) -> dict[str, Any]:
    path = out_dir / "latest.json"
    return json.loads(path.read_text()) if path.exists() else {}


def write(results: dict[str, Any], out_dir: Path = RESULTS) -> None:
    """Both files, the goals and the report computed again from every scenario's figures."""
    results["goals"] = goals(results)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "latest.json").write_text(json.dumps(results, indent=2) + "\n")
    (out_dir / "latest.md").write_text(markdown(results))


def record(
    scenario: str, figures: dict[str, Any], meta: dict[str, Any], out_dir: Path = RESULTS
) -> dict[str, Any]:
    """Put one scenario's ``figures`` (under its ``KEYS``) and ``meta`` into the results file
    in ``out_dir``, keeping every other scenario's; return the whole."""
    if unknown := set(figures) - set(keys := SCENARIOS[scenario].KEYS):
        raise ValueError(f"{scenario} writes {keys}, not {sorted(unknown)}")
    results = {**read(out_dir), **figures}
    results.setdefault("scenario_meta", {})[scenario] = meta
    meta_all = results.setdefault("meta", {})
    meta_all.update(last_written=meta["date"], cpus=meta["cpus"], python=meta["python"])
    write(results, out_dir)
    return results


def record_part(
    scenario: str, part: str, figures: dict[str, Any], meta: dict[str, Any], out_dir: Path
) -> dict[str, Any]:
    """Merge one ``part``'s figures into its scenario's (an odd path's), keeping the others';
    the meta says each part's date (``parts``)."""
    results = read(out_dir)
    merged = {**results.get(scenario, {}), **figures}
    previous = results.get("scenario_meta", {}).get(scenario, {})
    parts = {**previous.get("parts", {}), part: meta["date"]}
    return record(scenario, {scenario: merged}, {**meta, "parts": parts}, out_dir)

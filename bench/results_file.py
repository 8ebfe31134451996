"""The results file, ``bench/results/latest.{json,md}``: the latest figures of every scenario,
each with the provenance of its own run. ``run_all.py`` is its only writer, through
:func:`record`: a scenario's figures replace its own only, and carry what produced them (the
commit, whether the measured code had uncommitted changes, the date, the machine and its load,
the exact command and how long the scenario took). Nothing else writes the file: a figure that
no run of this code measured is absent, and its goal reads "not measured".
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

#: The code a figure depends on: a change under these paths, uncommitted, makes a run's
#: commit an incomplete description of what it measured (``commit_dirty``).
MEASURED_CODE = ("airflow_volcano_wandb", "bench", "test_support", "tests", "dags", "packages")
#: Every key a scenario's provenance has, all written here, none by hand.
PROVENANCE = (
    "date", "cpus", "python", "load_before", "quick", "commit", "commit_dirty", "how", "took_s",
)  # fmt: skip
#: What every entry must have: runs recorded before 2026-12-06 lack ``commit_dirty`` and
#: ``took_s``, and their report says so.
REQUIRED = ("date", "cpus", "python", "load_before", "quick", "commit", "how")


def load_before() -> float:
    """The 1-minute load average now: taken just before a scenario runs."""
    return round(os.getloadavg()[0], 2)


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip()


def commit() -> str | None:
    return _git("rev-parse", "--short", "HEAD") or None


def commit_dirty() -> bool:
    """Whether the measured code differs from the commit (results files excepted)."""
    changed = _git("status", "--porcelain", "--untracked-files=no", "--", *MEASURED_CODE)
    lines = (changed or "").splitlines()
    return any(not line[3:].startswith("bench/results/") for line in lines)


def code_state() -> tuple[str | None, bool]:
    """The commit and whether the measured code differs from it: taken as a scenario starts."""
    return commit(), commit_dirty()


def scenario_meta(
    load: float, *, how: str, code: tuple[str | None, bool], took_s: float, quick: bool = False
) -> dict[str, Any]:
    """A scenario's provenance: the date (now: when it ended), the machine and its load before
    it ran, the code's commit as it started (``code_state``), the command that ran it and how
    long it took."""
    meta = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "cpus": os.cpu_count()}
    meta |= {"python": platform.python_version(), "load_before": load, "quick": quick}
    meta |= {"commit": code[0], "commit_dirty": code[1], "how": how}
    return {**meta, "took_s": round(took_s, 1)}


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
    if missing := set(REQUIRED) - set(meta):
        raise ValueError(f"{scenario}'s figures lack their provenance: {sorted(missing)}")
    results = {**read(out_dir), **figures}
    results.setdefault("scenario_meta", {})[scenario] = meta
    dates = [m["date"] for m in results["scenario_meta"].values()]
    results["meta"] = {"last_written": max(dates), "cpus": meta["cpus"], "python": meta["python"]}
    write(results, out_dir)
    return results

"""The benchmark report of a partial run (``bench/run_all.py --only ...``) says what it ran."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import run_all

META = {"date": "2026-12-01", "cpus": 2, "python": "3.11", "load_before": 0.1, "total_s": 1.0}
FIGURES = {
    "render_ms": {"seed": 1.5, "tasks_100": 9.0, "cases": {}},
    "submit_overhead_s": {"median": 0.2, "p99": 0.4, "n": 3},
}


@pytest.mark.parametrize("key", sorted(FIGURES))
def test_a_partial_run_reports_the_figures_it_has(key):
    results = {key: FIGURES[key], "meta": META}
    results["goals"] = run_all.goals(results)
    report = run_all.markdown(results)
    assert "## 3. Operator overhead" in report
    assert ("`render_job`" in report) is (key == "render_ms")
    assert ("job created" in report) is (key == "submit_overhead_s")


def test_the_odd_paths_block_shows_the_crash_loop_figure():
    crash = {"crash_loop_detect_s": 4.5, "crash_loop_run": {"task_state": "failed"}}
    crash["crash_loop_run"]["max_container_restarts"] = 3
    results = {"odd_paths": crash, "meta": META}
    results["goals"] = run_all.goals(results)
    report = run_all.markdown(results)
    assert "## Odd paths" in report and "`crash_loop_detect_s`: 4.5 s" in report
    assert "restart_false_timeouts" not in report

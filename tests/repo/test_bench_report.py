"""The benchmark report of a partial run (``bench/run_all.py --only ...``) says what it ran."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import report as bench_report

META = {"date": "2026-12-01", "cpus": 2, "python": "3.11", "load_before": 0.1, "total_s": 1.0}
FIGURES = {
    "render_ms": {"seed": 1.5, "tasks_100": 9.0, "cases": {}},
    "submit_overhead_s": {"median": 0.2, "p99": 0.4, "n": 3},
}


@pytest.mark.parametrize("key", sorted(FIGURES))
def test_a_partial_run_reports_the_figures_it_has(key):
    results = {key: FIGURES[key], "meta": META}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "## 3. Operator overhead" in report
    assert ("`render_job`" in report) is (key == "render_ms")
    assert ("job created" in report) is (key == "submit_overhead_s")


def test_the_odd_paths_block_shows_the_crash_loop_figure():
    crash = {"crash_loop_detect_s": 4.5, "crash_loop_run": {"task_state": "failed"}}
    crash["crash_loop_run"]["max_container_restarts"] = 3
    results = {"odd_paths": crash, "meta": META}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "## Odd paths" in report and "`crash_loop_detect_s`: 4.5 s" in report
    assert "restart_false_timeouts" not in report


def _kind(runs: float, p50: float, p99: float) -> dict:
    timing = {"n": 25, "p50": p50, "p99": p99, "min": p50, "max": p99}
    return {"job_runs_s": runs, "completed_to_success_s": timing, "task_s": timing}


def test_a_run_of_only_e2e_real_airflow_reports_it_with_the_settle_apart():
    figures = {
        "tasks": 50,
        "wave": 10,
        "defer_settle_seconds": 15.0,
        "schedulers": 2,
        "triggerers": 2,
        "wall_s": 600.0,
        "wrong": [],
        "ends_at_once": _kind(1.0, 14.0, 20.0),
        "ends_after_settle": _kind(45.0, 3.0, 6.0),
        "all": {"completed_to_success_s": {"n": 50, "p50": 8.0, "p99": 20.0}},
        "trial_passed": True,
    }
    results = {"e2e_real_airflow": figures, "meta": META}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "## End to end through the real scheduler and triggerer" in report
    assert "| end at once (inside the settle) | 1 s | 14.0 s | 20.0 s |" in report
    assert "The settle's cost at the median: 11.0 s" in report
    assert "## 3. Operator overhead" not in report


def test_an_e2e_real_airflow_run_that_did_not_run_says_why():
    results = {"e2e_real_airflow": {"tasks": 50, "error": "pytest exited 1"}, "meta": META}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "The driver did not run: pytest exited 1." in report


def test_a_run_of_only_resume_reports_its_four_figures():
    figures = {"steps_before_kill": 1041, "resumed_from_step": 1041, "steps_repeated": 0}
    results = {"resume": {**figures, "resume_overhead_s": 57.7, "train_s": 5.0}, "meta": META}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "## Resume on the same run" in report
    assert "stopped after step 1041" in report and "resumed from step 1041" in report
    assert "`steps_repeated` 0" in report and "57.7 s after the SIGTERM" in report
    assert "GPU-seconds saved" not in report  # a run from before the trainer said its seconds
    results["resume"].update(saved_training_s=5.3, saved_gpu_seconds=10.6)
    assert "held 5.3 s of training: 10.6 GPU-seconds saved" in bench_report.markdown(results)


def test_a_scenario_recorded_alone_keeps_the_others_with_their_own_dates(tmp_path):
    import results_file

    render = {"seed": 1.5, "tasks_100": 9.0, "cases": {}}
    first = results_file.scenario_meta(0.5, how="bench/run_all.py --only render")
    results_file.record("render", {"render_ms": render}, first, tmp_path)
    later = {**results_file.scenario_meta(3.0, how="bench/resume_bench.py"), "date": "later"}
    resume = {"steps_before_kill": 10, "resumed_from_step": 10, "steps_repeated": 0}
    results = results_file.record(
        "resume", {"resume": {**resume, "resume_overhead_s": 8.0, "train_s": 5.0}}, later, tmp_path
    )
    assert results["render_ms"] == render
    assert results["scenario_meta"]["render"]["date"] == first["date"]
    assert results["scenario_meta"]["resume"]["load_before"] == 3.0
    report = (tmp_path / "latest.md").read_text()
    assert f"_Measured {first['date']}" in report and "_Measured later" in report


def test_carried_over_figures_say_so():
    results = {
        "real_pods": {"pods_ready_s": 2, "train_s": 4, "completion_to_task_success_s": 0.6},
        "scenario_meta": {"real_pods": {"date": "2026-12-01", "carried_over": "docs say so"}},
        "meta": {},
    }
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "_Carried over, not measured by this tool: docs say so._" in report


def test_odd_paths_parts_keep_their_own_dates(tmp_path):
    import results_file

    meta = {**results_file.scenario_meta(1.0), "date": "d1"}
    crash = {"crash_loop_detect_s": 5.0, "task_state": "failed", "max_container_restarts": 3}
    figures = {"crash_loop_detect_s": 5.0, "crash_loop_run": crash}
    results_file.record_part("odd_paths", "crash-loop", figures, meta, tmp_path)
    meta = {**results_file.scenario_meta(1.0), "date": "d2"}
    results = results_file.record_part(
        "odd_paths", "fixed-name", {"fixed_name_retries_ok": True}, meta, tmp_path
    )
    assert results["odd_paths"] == {**figures, "fixed_name_retries_ok": True}
    assert results["scenario_meta"]["odd_paths"]["parts"] == {
        "crash-loop": "d1",
        "fixed-name": "d2",
    }


def test_a_run_of_only_parse_light_reports_each_dag_and_misses_a_client():
    dag = {"ms": 1400, "min_ms": 1100, "modules": 1570, "client_modules": 0, "ratio": 1.09}
    names = ("volcano_pytorch_manual", "volcano_pytorch_retraining", "volcano_pytorch_sweep")
    figures = {"runs": 3, "standard_ms": 1277, "standard_min_ms": 1031, "standard_modules": 1491}
    figures |= {"load_after": 2.8, **{name: dict(dag) for name in names}}
    results = {"parse_light": figures, "meta": META}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "| `volcano_pytorch_sweep` | 1400 | 1100 | 1570 | 0 | 1.09 |" in report
    assert "no client: met (1.09x, 0)" in report
    figures["volcano_pytorch_manual"]["client_modules"] = 865
    assert "no client: MISSED (1.09x, 865)" in bench_report.goals(results)[-1]

"""The benchmark report of a partial run (``bench/run_all.py --only ...``) says what it ran."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from test_support import e2e_real, e2e_real_figures

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


def _row(family: str, kind: str, done: float, deferred: bool = False, state: str = "success"):
    """A row of the e2e_real_airflow driver (``test_support/e2e_real.ended_row``)."""
    row = {"run_id": "r", "family": family, "kind": kind, "state": state, "try_number": 1}
    row |= {"deferred": deferred, "done_to_success_s": done, "pod_done_to_success_s": done}
    row |= {"task_s": done + 5, "first_try_slot_s": 3.0, "fired_to_success_s": None}
    if deferred:
        row |= {name: 0.5 for *_, name in e2e_real.STEPS} | {"fired_to_success_s": done - 1}
    return row


def test_a_run_of_only_e2e_real_airflow_reports_the_provider_beside_kpo():
    rows = [
        *[_row("provider", "ends_at_once", 0.8)] * 3,
        _row("provider", "ends_after_settle", 3.0, deferred=True),
        _row("kpo", "ends_at_once", 8.0, deferred=True),
        _row("kpo", "ends_at_once", 9.0, deferred=True, state="failed"),
        _row("kpo", "ends_after_settle", 5.0, deferred=True),
    ]
    planned = {"provider ends_at_once": 3, "provider ends_after_settle": 1, "kpo ends_at_once": 2}
    figures = e2e_real_figures.e2e_figures(rows, time.monotonic(), planned, 10)
    figures |= {"trial_passed": True, "measured": {"date": "d", "load_before": 1.0}}
    results = {"e2e_real_airflow": figures, "meta": META}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "## End to end through the real scheduler and triggerer" in report
    assert "| end at once (inside the first window) | 1 s | 0 | 0.8 s | 0.8 s |" in report
    assert "| KPO `ends_at_once` | 1 s | 8.0 s | 8.0 s | 1 | 2 | 3.0 s | 2 |" in report
    assert (
        "The provider's median over KPO's: ends_at_once **0.1**, ends_after_settle **0.6**"
        in report
    )
    assert "| the triggerer writes the event (`scheduled_when`) | 0.5 s | 0.5 s | 0.5 s |" in report
    assert "ends_after_settle: 0.6 (goal at most 0.6): met" in report
    assert "slots are crowded), over KPO's: ends_after_settle **0.56**." in report  # 2.5 / 4.5
    window = f"`defer_after` {e2e_real.DEFER_AFTER:g} s"  # the shipped default
    assert f"within 2 s of `Completed` (p50, {window}): 0.8 s, met" in report
    assert "`KubernetesPodOperator` lost 1 tasks" in report
    assert "## 3. Operator overhead" not in report


def test_e2e_real_airflow_on_both_executors_names_each_and_celerys_window_cost():
    rows = [
        _row("provider", "ends_at_once", 0.8),
        _row("provider", "ends_after_settle", 3.0, deferred=True),
        _row("kpo", "ends_after_settle", 5.0, deferred=True),
    ]
    planned = {
        "provider ends_at_once": 1,
        "provider ends_after_settle": 1,
        "kpo ends_after_settle": 1,
    }
    results: dict = {"meta": META}
    for executor, key in (("local", "e2e_real_airflow"), ("celery", "e2e_real_airflow_celery")):
        figures = e2e_real_figures.e2e_figures(rows, time.monotonic(), planned, 10, executor)
        results[key] = figures | {"trial_passed": True, "measured": {"date": "d"}}
    results["goals"] = bench_report.goals(results)
    report = bench_report.markdown(results)
    assert "**On LocalExecutor** (`e2e_real_airflow`)." in report
    assert "**On CeleryExecutor** (`e2e_real_airflow_celery`)." in report
    assert "2 Celery workers (CeleryExecutor, `worker_concurrency` 2 each" in report
    assert "a task slot held 3.0 s per task on average" in report  # each row's first try: 3 s
    assert "a resumed task waited 0.5 s for a slot again" in report


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


def _meta(load: float, how: str) -> dict:
    import results_file

    return results_file.scenario_meta(load, how=how, code=("abc1234", False), took_s=1.0)


def test_a_scenario_recorded_alone_keeps_the_others_with_their_own_dates(tmp_path):
    import results_file

    render = {"seed": 1.5, "tasks_100": 9.0, "cases": {}}
    first = _meta(0.5, "bench/run_all.py --only render")
    results_file.record("render", {"render_ms": render}, first, tmp_path)
    later = {**_meta(3.0, "bench/run_all.py --only resume"), "date": "later"}
    resume = {"steps_before_kill": 10, "resumed_from_step": 10, "steps_repeated": 0}
    results = results_file.record(
        "resume", {"resume": {**resume, "resume_overhead_s": 8.0, "train_s": 5.0}}, later, tmp_path
    )
    assert results["render_ms"] == render
    assert results["scenario_meta"]["render"]["date"] == first["date"]
    assert results["scenario_meta"]["resume"]["load_before"] == 3.0
    report = (tmp_path / "latest.md").read_text()
    assert f"_Measured {first['date']}" in report and "_Measured later" in report
    assert "commit abc1234" in report and "`bench/run_all.py --only resume`" in report


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

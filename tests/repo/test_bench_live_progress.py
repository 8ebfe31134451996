"""``live_progress``'s report: the master log's part and the W&B part (issue 43); a part not
asked for (``--live-parts``) is not measured, never carried over from an earlier run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import report as bench_report
import scenario_live_progress

FOLLOW = {"jobs": 100, "runs": 3, "lines_per_job": 200, "seconds_measured": 40.0, "log_lines": 9}
FOLLOW |= {
    f"{k}_{side}": 1.0
    for k in ("cpu_s", "cpu_s_per_min_window", "rss_mb")
    for side in ("off", "on")
}
ROW = {"cpu_s_per_min": 2.5, "helper_cpu_s_per_min": 1.5, "rss_mb": 300.0, "helper_rss_mb": 60.0}
ROW |= {"wandb_reads_per_min": 3000.0, "wandb_reads_per_job": 3.0, "wandb_clients": 1}
ROW |= {"apiserver_requests_per_min": 1000.0, "patch_jobs_per_min": 998.0}
ROW |= {"apiserver_requests_band_per_min": 2.0}
WANDB = {"sizes": [1000], "runs": 1, "progress_interval_s": 20.0, "settle_s": 20.0}
WANDB |= {"window_s": 60.0, "steps_per_second": 10, "measured": "2026-12-05 03:50 UTC"}
WANDB["rows"] = [{"jobs": 1000, "side": side, **ROW} for side in ("off", "on", "annotated")]


def test_the_w_and_b_rows_follow_the_master_logs_table():
    section = "\n".join(
        scenario_live_progress.section({"live_progress": {**FOLLOW, "wandb": WANDB}})
    )
    assert "3 reads per job" in section and "`progress_interval` 20 s" in section
    assert (
        "| 1000 | annotated | 2.5 | 1.5 | 300.0 (+60.0) | 3000.0 (3.0) | 1 | 1000 ± 2 (998.0) |"
        in section
    )
    assert "| on |" in section and "| off |" in section  # the master log's table is kept
    assert "W&B" not in "\n".join(scenario_live_progress.section({"live_progress": FOLLOW}))


def test_the_w_and_b_part_alone_leaves_the_master_logs_figures_not_measured(tmp_path, monkeypatch):
    import results_file

    monkeypatch.setattr(scenario_live_progress.live_wandb, "run", lambda ctx: WANDB)
    ctx = argparse.Namespace(live_parts="wandb", results=tmp_path)
    figures = scenario_live_progress.run(ctx)["live_progress"]
    assert figures == {"wandb": WANDB}
    how = "bench/run_all.py --only live_progress --live-parts wandb"
    meta = results_file.scenario_meta(5.0, how=how, code=("abc1234", False), took_s=90.0)
    report = bench_report.markdown(
        results_file.record("live_progress", {"live_progress": figures}, meta, tmp_path)
    )
    assert "master log following off and on" not in report and "W&B progress" in report
    assert "- W&B progress at 1000 running jobs costs the apiserver nothing" in report
    assert "(0 ± 4 requests/min on vs off)" in report
    assert "each job at most once a progress_interval: met (clients made [1, 1]" in report

"""GPU-seconds per rank of a finished job (``gpu_usage``, pure)."""

from __future__ import annotations

from datetime import datetime

from airflow_volcano_wandb.job.gpu_usage import describe, gpu_seconds

NOW = 1_800_000_000.0


def pod(name: str, gpus: int, start: str | None, end: str | None) -> dict:
    state = {"terminated": {"finishedAt": end}} if end else {"running": {}}
    return {
        "metadata": {"name": f"job-{name}"},
        "spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
        "status": {"startTime": start, "containerStatuses": [{"state": state}]},
    }


def test_each_rank_costs_its_gpus_times_its_run_time():
    pods = [
        pod("master-0", 8, "2026-12-01T10:00:00Z", "2026-12-01T10:10:00Z"),
        pod("worker-0", 8, "2026-12-01T10:00:05Z", "2026-12-01T10:10:00Z"),
        pod("worker-1", 0, "2026-12-01T10:00:05Z", "2026-12-01T10:10:00Z"),
        pod("worker-2", 8, None, None),  # never started: nothing
    ]
    usage = gpu_seconds(pods, "job", NOW)
    assert usage == {"master-0": 4800.0, "worker-0": 4760.0, "worker-1": 0.0}
    line = describe(usage)
    assert line.startswith("GPU-seconds: master-0 4800, worker-0 4760, worker-1 0")
    assert "total 9560 s = 2.656 GPU-hours" in line


def test_a_rank_still_running_counts_until_now():
    started = "2026-12-01T10:00:00Z"
    now = datetime.fromisoformat("2026-12-01T10:01:00+00:00").timestamp()
    assert gpu_seconds([pod("master-0", 2, started, None)], "job", now) == {"master-0": 120.0}

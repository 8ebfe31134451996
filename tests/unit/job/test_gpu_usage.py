"""GPU-seconds per rank of a finished job (``gpu_usage``, pure)."""

from __future__ import annotations

from datetime import datetime

from airflow_volcano_wandb.job.gpu_usage import describe, gpu_seconds, ran_between, removed_ranks

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


def test_ranks_volcano_removed_at_completion_count_from_the_whole_gang_to_the_jobs_end():
    """The master's CompleteJob removes workers still running: their pods are gone, so they
    count from when the gang was whole (they started no later) to the job's end."""
    master = pod("master-0", 8, "2026-12-01T10:00:00Z", "2026-12-01T10:10:00Z")
    gpus = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}]}
    job = {
        "metadata": {"name": "job"},
        "spec": {
            "tasks": [
                {"name": "master", "replicas": 1, "template": {"spec": gpus}},
                {"name": "worker", "replicas": 2, "template": {"spec": gpus}},
            ]
        },
    }
    removed = removed_ranks(job, [master])
    assert removed == {"worker-0": 8, "worker-1": 8}
    ran = ran_between("2026-12-01T10:00:10Z", "2026-12-01T10:10:00Z")
    usage = gpu_seconds([master], "job", NOW, removed, ran)
    assert usage == {"master-0": 4800.0, "worker-0": 4720.0, "worker-1": 4720.0}
    # Without the whole gang's time, how long they ran is unknown: they are left out.
    assert gpu_seconds([master], "job", NOW, removed, None) == {"master-0": 4800.0}
    assert ran_between(None, "2026-12-01T10:10:00Z") is None

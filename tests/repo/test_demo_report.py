"""`make demo`'s rank report: what a placed pod says, and the order ranks are printed in."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from kubernetes import client

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "demo.py"
_spec = importlib.util.spec_from_file_location("avw_demo_script", SCRIPT)
demo = importlib.util.module_from_spec(_spec)
sys.modules["avw_demo_script"] = demo  # dataclasses resolve their annotations through it
_spec.loader.exec_module(demo)


def _pod(name: str, task: str, node: str | None, rank: str, world: str = "3") -> client.V1Pod:
    env = [
        client.V1EnvVar(name="RANK", value=rank),
        client.V1EnvVar(name="WORLD_SIZE", value=world),
        client.V1EnvVar(name="WANDB_API_KEY", value_from=client.V1EnvVarSource()),
    ]
    return client.V1Pod(
        metadata=client.V1ObjectMeta(
            name=name, labels={demo.JOB_LABEL: "job", demo.TASK_LABEL: task}
        ),
        spec=client.V1PodSpec(node_name=node, containers=[client.V1Container(name="c", env=env)]),
    )


def test_an_unscheduled_pod_has_no_placement():
    assert demo.placement(_pod("job-worker-0", "worker", None, "1")) is None


def test_a_placed_pod_reports_task_node_rank_and_world_size():
    placed = demo.placement(_pod("job-worker-0", "worker", "kwok-gpu-node-2", "1"))
    assert placed == demo.Placement("job", "job-worker-0", "worker", "kwok-gpu-node-2", "1", "3")
    assert "task=worker" in placed.line() and "RANK=1 WORLD_SIZE=3" in placed.line()


def test_placements_are_in_numeric_rank_order_for_one_job():
    pods = [
        _pod("job-worker-9", "worker", "n1", "10", "11"),
        _pod("job-master-0", "master", "n0", "0", "11"),
        _pod("job-worker-0", "worker", "n2", "2", "11"),
        _pod("job-worker-1", "worker", None, "1", "11"),  # never placed
    ]
    other = _pod("other-master-0", "master", "n0", "0", "1")
    other.metadata.labels[demo.JOB_LABEL] = "other"
    assert [p.rank for p in demo.placements([*pods, other], "job")] == ["0", "2", "10"]

"""The sync wait's master-log follower joins split lines and keeps to the cap."""

from __future__ import annotations

from types import SimpleNamespace

from airflow_volcano_wandb.logs.log_follower import MasterLogFollower
from tests.line_log import LineLog


def _follower(chunks: list[bytes], log: LineLog, **caps: int) -> MasterLogFollower:
    pod = {
        "metadata": {"name": "j-master-0", "labels": {"volcano.sh/task-spec": "master"}},
        "status": {"phase": "Running"},
    }
    response = SimpleNamespace(stream=lambda: iter(chunks))
    hook = SimpleNamespace(
        list_job_pods=lambda name, namespace: [pod],
        core_v1_client=SimpleNamespace(read_namespaced_pod_log=lambda *a, **k: response),
    )
    return MasterLogFollower(hook, "j", "ns", "master", log, **caps)


def test_lines_split_across_chunks_are_shown_once_and_whole():
    log = LineLog()
    _follower([b"epoch 1 lo", "ss 0.5 ✓".encode()[:-1], "✓".encode()[-1:] + b"\nend"], log).run()
    assert log.lines == ["[j-master-0] epoch 1 loss 0.5 ✓", "[j-master-0] end"]


def test_the_cap_ends_the_follow_with_one_notice():
    log = LineLog()
    _follower([b"a\nb\nc\n", b"d\n"], log, max_lines=2).run()
    assert log.lines == [
        "[j-master-0] a",
        "[j-master-0] b",
        "[j-master-0] ... master log capped at 2 lines (2 bytes); the full log is in the pod",
    ]

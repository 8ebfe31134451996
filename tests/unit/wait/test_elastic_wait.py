"""The wait on an elastic job (issue 51 goal 2): running with fewer workers than it asks for
is running, not waiting for its gang; fewer than ``min_workers`` is the placement wait (and
its pending timeout) as today; the task log says when a worker is lost and when one joins."""

from __future__ import annotations

from datetime import datetime

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.template.elastic import ELASTIC_ANNOTATION
from airflow_volcano_wandb.wait.judge import WaitTarget, gang_was_whole, judge, see, unplaced_ranks
from airflow_volcano_wandb.wait.step import WaitMemory, gang_is_whole, look

CREATED = "2026-11-29T10:00:00Z"
T0 = datetime.fromisoformat("2026-11-29T10:00:00+00:00").timestamp()
TARGET = WaitTarget(name="j", namespace="ns", uid="u-1", pending_timeout=60)


def job(running: dict[str, int], *, elastic: bool = True, phase: str = "Running") -> dict:
    """``elastic=(1, 3)``'s job (master + 1 needed, 3 workers asked), ``running`` pods each."""
    meta = {"name": "j", "namespace": "ns", "uid": "u-1", "creationTimestamp": CREATED}
    if elastic:
        meta["annotations"] = {ELASTIC_ANNOTATION: "1:3"}
    return {
        "metadata": meta,
        "spec": {
            "minAvailable": 2 if elastic else 4,
            "tasks": [
                {"name": "master", "replicas": 1, "minAvailable": 1},
                {"name": "worker", "replicas": 3, "minAvailable": 1 if elastic else 3},
            ],
        },
        "status": {
            "state": {"phase": phase, "lastTransitionTime": CREATED},
            "taskStatusCount": {t: {"phase": {"Running": n}} for t, n in running.items() if n},
            # Volcano's Running condition: the gang (minAvailable) was placed.
            "conditions": [{"status": phase, "lastTransitionTime": CREATED}],
        },
    }


def test_an_elastic_job_with_fewer_workers_than_asked_is_running_not_pending() -> None:
    partial = job({"master": 1, "worker": 1})
    assert unplaced_ranks(interpret(partial)) == {}
    assert gang_is_whole(see(partial)) and gang_was_whole(see(partial))
    assert judge(partial, TARGET, T0 + 10_000) is None  # no pending timeout
    assert interpret(partial).progress() == "Running: master 1/1, worker 1/3, at least 1"


def test_an_elastic_job_below_its_min_workers_still_waits_for_its_gang_until_the_timeout() -> None:
    below = job({"master": 1, "worker": 0}, phase="Pending")
    assert unplaced_ranks(interpret(below)) == {"worker": "0/3"}
    assert judge(below, TARGET, T0 + 59) is None
    assert judge(below, TARGET, T0 + 60).outcome is Ending.PENDING_TIMEOUT


def test_the_same_job_without_elastic_misses_its_workers() -> None:
    fixed = job({"master": 1, "worker": 1}, elastic=False)
    assert unplaced_ranks(interpret(fixed)) == {"worker": "1/3"}
    assert not gang_is_whole(see(fixed))


def test_the_task_log_says_when_a_worker_is_lost_and_when_one_joins() -> None:
    memory = WaitMemory()
    lines = []
    for workers in (2, 2, 1, 3):
        seen = look(job({"master": 1, "worker": workers}), TARGET, memory, T0)
        memory = seen.memory
        lines.append(seen.progress)
    assert lines == [
        "Running: master 1/1, worker 2/3, at least 1",
        None,  # nothing changed: nothing logged
        "Running: master 1/1, worker 1/3, at least 1 - worker lost: 1 of 3 running (at least 1)",
        "Running: master 1/1, worker 3/3, at least 1 - worker joined: 3 of 3 running (at least 1)",
    ]


def test_a_job_without_elastic_logs_no_membership_note() -> None:
    memory = look(job({"master": 1, "worker": 3}, elastic=False), TARGET, WaitMemory(), T0).memory
    lost = look(job({"master": 1, "worker": 2}, elastic=False), TARGET, memory, T0)
    assert "worker lost:" not in (lost.progress or "") and lost.memory.elastic_running == ()

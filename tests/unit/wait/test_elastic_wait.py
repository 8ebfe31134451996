"""The wait on an elastic job (issue 51 goal 2): running with fewer workers than it asks for
is running, not waiting for its gang; fewer than ``min_workers`` is the placement wait (and
its pending timeout) as today; the task log says when a worker is lost and when one joins."""

from __future__ import annotations

from datetime import datetime

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.template.elastic import ELASTIC_ANNOTATION
from airflow_volcano_wandb.wait.judge import JobTarget, gang_was_whole, judge, see, unplaced_ranks
from airflow_volcano_wandb.wait.step import StepMemory, gang_is_whole, look
from airflow_volcano_wandb.wait.training_progress import Progress, ProgressSeen, observe

CREATED = "2026-11-29T10:00:00Z"
T0 = datetime.fromisoformat("2026-11-29T10:00:00+00:00").timestamp()
TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", pending_timeout=60)


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
    memory = StepMemory()
    lines = []
    for workers in (2, 2, 1, 3):
        seen = look(job({"master": 1, "worker": workers}), TARGET, memory, T0)
        memory = seen.memory
        lines.append(seen.progress)
    assert lines == [
        "Running: master 1/1, worker 2/3, at least 1",
        None,  # nothing changed: nothing logged
        "Running: master 1/1, worker 1/3, at least 1 - worker lost: 1 of 3 running (at least 1)"
        ", resuming from its newest checkpoint",
        "Running: master 1/1, worker 3/3, at least 1 - worker joined: 3 of 3 running (at least 1)",
    ]


def test_a_job_without_elastic_logs_no_membership_note() -> None:
    memory = look(job({"master": 1, "worker": 3}, elastic=False), TARGET, StepMemory(), T0).memory
    lost = look(job({"master": 1, "worker": 2}, elastic=False), TARGET, memory, T0)
    assert "worker lost:" not in (lost.progress or "") and lost.memory.elastic_running == ()


def test_the_lost_line_names_the_last_step_the_wait_read() -> None:
    read = ProgressSeen(read=Progress(step=1800, at=T0, total_steps=4000))
    memory = look(job({"master": 1, "worker": 3}), TARGET, StepMemory(training=read), T0).memory
    lost = look(job({"master": 1, "worker": 2}), TARGET, memory, T0 + 5)
    assert lost.progress == (
        "Running: master 1/1, worker 2/3, at least 1 - worker lost: 2 of 3 running "
        "(at least 1), resuming from its newest checkpoint (last step seen 1,800)"
    )


def test_an_elastic_job_short_of_min_workers_past_the_pending_timeout_fails_as_never_placed():
    """Its survivors wait in torchrun's rendezvous using no GPU: the same typed failure as a
    gang that never fits, counted from the first look that saw it short."""
    memory = look(job({"master": 1, "worker": 2}), TARGET, StepMemory(), T0).memory
    short = job({"master": 1, "worker": 0})
    first = look(short, TARGET, memory, T0 + 100)
    assert first.result is None and first.memory.short_since == T0 + 100
    assert look(short, TARGET, first.memory, T0 + 159).result is None
    ended = look(short, TARGET, first.memory, T0 + 160).result
    assert ended is not None and ended.outcome is Ending.PENDING_TIMEOUT
    assert "fewer than its elastic minimum of workers for pending_timeout=60s" in ended.message
    # Back to its minimum in time: the clock stops.
    back = look(job({"master": 1, "worker": 1}), TARGET, first.memory, T0 + 150)
    assert back.result is None and back.memory.short_since is None
    assert look(short, TARGET, back.memory, T0 + 200).result is None


def test_a_fixed_job_that_loses_a_rank_is_restarting_not_timed_out() -> None:
    fixed = job({"master": 1, "worker": 3}, elastic=False)
    memory = look(fixed, TARGET, StepMemory(), T0).memory
    lost = look(job({"master": 1, "worker": 2}, elastic=False), TARGET, memory, T0 + 1000)
    assert lost.result is None and lost.memory.short_since is None


def test_the_progress_lines_carry_the_world_size_and_say_when_it_re_forms() -> None:
    seen, line = observe(ProgressSeen(), Progress(1800, T0, 4000, world_size=4), T0)
    assert line == "progress: step 1800/4000 (45 %), world size 4"
    # Re-formed on 3 and resumed from the checkpoint at 1,700: told at once, not due or not.
    seen, line = observe(seen, Progress(1700, T0 + 20, 4000, world_size=3), T0 + 20)
    assert line == (
        "progress: step 1700/4000 (42 %), world size 3"
        " - re-formed: world size 3 (was 4), resumed from step 1,700"
    )
    assert observe(seen, Progress(1710, T0 + 30, 4000, world_size=3), T0 + 30)[1] is None
    summary = {"train/step": 5, "_timestamp": T0, "elastic/world_size": 2}
    assert Progress.of_summary(summary).world_size == 2
    record = 'AVW_PROGRESS {"step": 5, "total_steps": 10, "world_size": 3}'
    assert Progress.of_log_line(record, T0).world_size == 3

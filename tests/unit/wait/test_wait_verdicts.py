"""The one vocabulary and the one judge of a wait (pure): outcomes, results, timeouts, gangs."""

from __future__ import annotations

import copy
import json
from datetime import datetime

import pytest

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.wait import cleanup
from airflow_volcano_wandb.wait.judge import (
    GANG_WHOLE_ANNOTATION,
    JobTarget,
    gang_was_whole,
    gang_whole_since,
    judge,
    see,
    unplaced_ranks,
)
from airflow_volcano_wandb.wait.outcome import ForeignEvent, WaitResult
from airflow_volcano_wandb.wait.step import (
    gang_is_whole,
    gang_whole_mark,
    needs_gang_whole_mark,
    progress_line,
)

CREATED = "2026-11-29T10:00:00Z"
T0 = datetime.fromisoformat("2026-11-29T10:00:00+00:00").timestamp()


def job(phase: str, *, uid="u-1", running=None, transition=None, retry=0, deleting=False):
    """A master + 2 workers job; ``running`` maps task -> started pods."""
    counts = {task: {"phase": {"Running": n}} for task, n in (running or {}).items() if n}
    meta = {"name": "j", "namespace": "ns", "uid": uid, "creationTimestamp": CREATED}
    if deleting:
        meta["deletionTimestamp"] = CREATED
    return {
        "metadata": meta,
        "spec": {"tasks": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 2}]},
        "status": {
            "state": {"phase": phase, "lastTransitionTime": transition or CREATED},
            "retryCount": retry,
            "taskStatusCount": counts,
        },
    }


TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", pending_timeout=60)


def test_result_round_trips_through_a_trigger_event():
    result = WaitResult(
        Ending.PENDING_TIMEOUT, "j", "ns", "u-1", "why", "Running", 2, {"worker": "0/2"}
    )
    event = json.loads(json.dumps(result.to_event()))
    assert WaitResult.from_event(event) == result


@pytest.mark.parametrize(
    "event",
    [None, [], {}, {"outcome": "exploded", "name": "j", "namespace": "n", "message": "m"}],
)
def test_an_event_that_is_not_a_wait_result_is_refused(event):
    with pytest.raises(ForeignEvent):
        WaitResult.from_event(event)


def test_a_waiting_job_has_no_outcome_of_its_own():
    with pytest.raises(ValueError):
        WaitResult.from_status(interpret(job("Running")))


@pytest.mark.parametrize(
    ("phase", "outcome"),
    [("Completed", Ending.SUCCEEDED), ("Failed", Ending.FAILED), ("Aborted", Ending.FAILED)],
)
def test_terminal_phases_end_the_wait(phase, outcome):
    assert judge(job(phase), TARGET, T0).outcome is outcome


def test_a_missing_job_or_another_uid_is_the_target_deleted():
    for current in (None, job("Running", uid="someone-else"), job("Running", deleting=True)):
        result = judge(current, TARGET, T0)
        assert result.outcome is Ending.DELETED and result.job_uid == "u-1"


def test_pending_counts_from_the_transition():
    pending = job("Pending", transition="2026-11-29T10:00:30Z")
    assert judge(pending, TARGET, T0 + 89) is None
    result = judge(pending, TARGET, T0 + 90)
    assert result.outcome is Ending.PENDING_TIMEOUT
    assert result.unplaced == {"master": "0/1", "worker": "0/2"}


def test_a_running_job_with_ranks_missing_is_still_waiting_for_its_gang():
    partial = job("Running", running={"master": 1})  # minAvailable 1: master alone runs
    assert unplaced_ranks(interpret(partial)) == {"worker": "0/2"}
    assert judge(partial, TARGET, T0 + 59) is None
    result = judge(partial, TARGET, T0 + 60)
    assert result.outcome is Ending.PENDING_TIMEOUT
    assert "worker 0/2" in result.message


def test_a_whole_gang_is_not_pending_and_a_later_lost_rank_is_volcanos_to_restore():
    whole = job("Running", running={"master": 1, "worker": 2})
    assert gang_is_whole(see(whole)) and judge(whole, TARGET, T0 + 10_000) is None
    lost_one = job("Running", running={"master": 1, "worker": 1})
    assert judge(lost_one, TARGET, T0 + 10_000, gang_seen_whole=True) is None


def test_after_a_restart_the_gang_clock_starts_at_the_transition():
    restarted = job("Running", running={"master": 1}, transition="2026-11-29T12:00:00Z", retry=1)
    assert judge(restarted, TARGET, T0 + 7200 + 59) is None
    assert judge(restarted, TARGET, T0 + 7200 + 60).outcome is Ending.PENDING_TIMEOUT


def marked_whole(current: dict) -> dict:
    """A copy of ``current`` as a waiter left it after once seeing its gang whole."""
    marked = copy.deepcopy(current)
    marked["metadata"]["annotations"] = gang_whole_mark(T0 + 5)
    return marked


def test_the_whole_gang_is_marked_once_and_the_mark_is_a_timestamp():
    whole = job("Running", running={"master": 1, "worker": 2})
    assert needs_gang_whole_mark(see(whole))
    assert gang_whole_mark(T0 + 5) == {GANG_WHOLE_ANNOTATION: "2026-11-29T10:00:05Z"}
    assert not needs_gang_whole_mark(see(marked_whole(whole)))
    assert not needs_gang_whole_mark(see(job("Running", running={"master": 1})))


@pytest.mark.parametrize(
    "later",
    [
        job("Running", running={"master": 1, "worker": 1}),  # a worker evicted, being replaced
        job("Running", running={"master": 1}, transition="2026-11-29T12:00:00Z", retry=1),
        job("Pending", transition="2026-11-29T12:00:00Z", retry=1),  # restarted, re-placing
    ],
    ids=["rank-lost", "restarted-running", "restarted-pending"],
)
def test_a_gang_marked_whole_never_gets_a_pending_timeout_whoever_judges_it(later):
    """A triggerer restarted, a retry reattaching, a reschedule poke: no memory, the mark."""
    assert judge(marked_whole(later), TARGET, T0 + 10**5) is None
    assert judge(later, TARGET, T0 + 10**5).outcome is Ending.PENDING_TIMEOUT  # unmarked


@pytest.mark.parametrize(("min_available", "was_whole"), [(3, True), (1, False)])
def test_volcanos_running_condition_shows_a_whole_gang_only_when_the_gang_is_every_rank(
    min_available, was_whole
):
    """No waiter saw it (all were restarted): Volcano's own record still tells, when its
    ``minAvailable`` is the world size (then Running means every rank ran)."""
    lost = job("Running", running={"master": 1, "worker": 1})
    lost["spec"]["minAvailable"] = min_available
    lost["status"]["conditions"] = [{"status": "Pending"}, {"status": "Running"}]
    assert gang_was_whole(see(lost)) is was_whole
    verdict = judge(lost, TARGET, T0 + 10**5)
    assert (verdict is None) is was_whole


def test_when_the_gang_was_whole_is_the_mark_else_volcanos_running_condition():
    """What the GPU-seconds of ranks Volcano removed at completion are counted from."""
    assert gang_whole_since(marked_whole(job("Completed"))) == "2026-11-29T10:00:05Z"
    ended = job("Completed")
    ended["spec"]["minAvailable"] = 3
    ended["status"]["conditions"] = [
        {"status": "Pending", "lastTransitionTime": "2026-11-29T10:00:00Z"},
        {"status": "Running", "lastTransitionTime": "2026-11-29T10:00:07Z"},
    ]
    assert gang_whole_since(ended) == "2026-11-29T10:00:07Z"
    ended["spec"]["minAvailable"] = 1  # Running says nothing about the other ranks then
    assert gang_whole_since(ended) is None
    assert gang_whole_since(job("Completed")) is None


def test_a_lost_rank_of_a_gang_that_was_whole_is_reported_as_restarting():
    lost = marked_whole(job("Running", running={"master": 1, "worker": 1}))
    lost["status"]["state"].update(reason="PodEvicted", message="worker-1 evicted")
    line = progress_line(see(lost))
    assert line.startswith("Running: master 1/1, worker 1/2")
    assert "restarting" in line and "worker 1/2" in line and "PodEvicted: worker-1 evicted" in line
    completing = marked_whole(job("Completing", running={"master": 1}))  # CompleteJob's doing
    assert "restarting" not in progress_line(see(completing))
    never_whole = job("Running", running={"master": 1, "worker": 1})
    assert "restarting" not in progress_line(see(never_whole))
    assert "restarting" in progress_line(see(never_whole), gang_seen_whole=True)


def test_no_pending_timeout_means_waiting_for_ever_on_placement():
    target = JobTarget(job_name="j", namespace="ns", job_uid="u-1")
    assert judge(job("Pending"), target, T0 + 10**6) is None


def test_the_deadline_ends_the_wait_as_a_timeout():
    target = JobTarget(job_name="j", namespace="ns", job_uid="u-1", deadline=T0 + 5)
    whole = job("Running", running={"master": 1, "worker": 2})
    assert judge(whole, target, T0 + 4) is None
    assert judge(whole, target, T0 + 5).outcome is Ending.TIMEOUT


@pytest.mark.parametrize(
    ("outcome", "action", "deletes"),
    [
        (Ending.SUCCEEDED, "delete_succeeded", True),
        (Ending.SUCCEEDED, "keep", False),
        (Ending.FAILED, "delete_succeeded", False),
        (Ending.FAILED, "delete", True),
        (Ending.PENDING_TIMEOUT, "keep", True),
        (Ending.TIMEOUT, "keep", True),
        (Ending.DELETED, "delete", False),
        (Ending.WATCH_LOST, "delete", False),
    ],
)
def test_the_cleanup_rule(outcome, action, deletes):
    assert cleanup.deletes_job(outcome, action) is deletes


def test_an_unknown_on_finish_action_is_refused():
    with pytest.raises(ValueError, match="on_finish_action") as raised:
        cleanup.check_on_finish_action("shred")
    assert "'keep_pod'" in str(raised.value)  # the message names every accepted value


@pytest.mark.parametrize(
    ("pod_operator_name", "ours"),
    [("delete_pod", "delete"), ("delete_succeeded_pod", "delete_succeeded"), ("keep_pod", "keep")],
)
def test_kubernetes_pod_operators_names_mean_ours(pod_operator_name, ours):
    cleanup.check_on_finish_action(pod_operator_name)
    assert cleanup.normalize_on_finish_action(pod_operator_name) == ours
    for outcome in Ending:
        assert cleanup.deletes_job(outcome, pod_operator_name) is cleanup.deletes_job(
            outcome, ours
        ), outcome

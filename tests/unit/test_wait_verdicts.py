"""The one vocabulary and the one judge of a wait (pure): outcomes, results, timeouts, gangs."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from airflow_volcano_wandb import cleanup
from airflow_volcano_wandb.job_status import interpret
from airflow_volcano_wandb.judge import WaitTarget, gang_is_whole, judge, unplaced_ranks
from airflow_volcano_wandb.outcome import Outcome, WaitResult, WaitResultError

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


TARGET = WaitTarget(name="j", namespace="ns", uid="u-1", pending_timeout=60)


def test_result_round_trips_through_a_trigger_event():
    result = WaitResult(
        Outcome.PENDING_TIMEOUT, "j", "ns", "u-1", "why", "Running", 2, {"worker": "0/2"}
    )
    event = json.loads(json.dumps(result.to_event()))
    assert WaitResult.from_event(event) == result


@pytest.mark.parametrize(
    "event",
    [None, [], {}, {"outcome": "exploded", "name": "j", "namespace": "n", "message": "m"}],
)
def test_an_event_that_is_not_a_wait_result_is_refused(event):
    with pytest.raises(WaitResultError):
        WaitResult.from_event(event)


def test_a_waiting_job_has_no_outcome_of_its_own():
    with pytest.raises(ValueError):
        WaitResult.from_status(interpret(job("Running")))


@pytest.mark.parametrize(
    ("phase", "outcome"),
    [("Completed", Outcome.SUCCEEDED), ("Failed", Outcome.FAILED), ("Aborted", Outcome.FAILED)],
)
def test_terminal_phases_end_the_wait(phase, outcome):
    assert judge(job(phase), TARGET, T0).outcome is outcome


def test_a_missing_job_or_another_uid_is_the_target_deleted():
    for current in (None, job("Running", uid="someone-else"), job("Running", deleting=True)):
        result = judge(current, TARGET, T0)
        assert result.outcome is Outcome.DELETED and result.uid == "u-1"


def test_pending_counts_from_the_transition():
    pending = job("Pending", transition="2026-11-29T10:00:30Z")
    assert judge(pending, TARGET, T0 + 89) is None
    result = judge(pending, TARGET, T0 + 90)
    assert result.outcome is Outcome.PENDING_TIMEOUT
    assert result.unplaced == {"master": "0/1", "worker": "0/2"}


def test_a_running_job_with_ranks_missing_is_still_waiting_for_its_gang():
    partial = job("Running", running={"master": 1})  # minAvailable 1: master alone runs
    assert unplaced_ranks(interpret(partial)) == {"worker": "0/2"}
    assert judge(partial, TARGET, T0 + 59) is None
    result = judge(partial, TARGET, T0 + 60)
    assert result.outcome is Outcome.PENDING_TIMEOUT
    assert "worker 0/2" in result.message


def test_a_whole_gang_is_not_pending_and_a_later_lost_rank_is_volcanos_to_restore():
    whole = job("Running", running={"master": 1, "worker": 2})
    assert gang_is_whole(whole) and judge(whole, TARGET, T0 + 10_000) is None
    lost_one = job("Running", running={"master": 1, "worker": 1})
    assert judge(lost_one, TARGET, T0 + 10_000, gang_seen_whole=True) is None


def test_after_a_restart_the_gang_clock_starts_at_the_transition():
    restarted = job("Running", running={"master": 1}, transition="2026-11-29T12:00:00Z", retry=1)
    assert judge(restarted, TARGET, T0 + 7200 + 59) is None
    assert judge(restarted, TARGET, T0 + 7200 + 60).outcome is Outcome.PENDING_TIMEOUT


def test_no_pending_timeout_means_waiting_for_ever_on_placement():
    target = WaitTarget(name="j", namespace="ns", uid="u-1")
    assert judge(job("Pending"), target, T0 + 10**6) is None


def test_the_deadline_ends_the_wait_as_a_timeout():
    target = WaitTarget(name="j", namespace="ns", uid="u-1", deadline=T0 + 5)
    whole = job("Running", running={"master": 1, "worker": 2})
    assert judge(whole, target, T0 + 4) is None
    assert judge(whole, target, T0 + 5).outcome is Outcome.TIMEOUT


@pytest.mark.parametrize(
    ("outcome", "action", "deletes"),
    [
        (Outcome.SUCCEEDED, "delete_succeeded", True),
        (Outcome.SUCCEEDED, "keep", False),
        (Outcome.FAILED, "delete_succeeded", False),
        (Outcome.FAILED, "delete", True),
        (Outcome.PENDING_TIMEOUT, "keep", True),
        (Outcome.TIMEOUT, "keep", True),
        (Outcome.DELETED, "delete", False),
        (Outcome.WATCH_LOST, "delete", False),
    ],
)
def test_the_cleanup_rule(outcome, action, deletes):
    assert cleanup.deletes_job(outcome, action) is deletes


@pytest.mark.parametrize(
    ("phase", "deletes"),
    [
        ("", True),
        ("Pending", True),
        ("Running", True),
        ("Restarting", True),
        ("Completing", True),
        ("Completed", False),
        ("Failed", False),
        ("Aborted", False),
        ("Terminated", False),
    ],
)
def test_a_kill_deletes_only_a_job_that_has_not_ended(phase, deletes):
    """A stale trigger's on_kill may run after its job ended and its task resumed (a second
    triggerer took the wait over): that is not a kill of running training."""
    job = {"metadata": {"name": "j", "namespace": "ns", "uid": "u"}}
    if phase:
        job["status"] = {"state": {"phase": phase}}
    assert cleanup.kill_deletes(job) is deletes


def test_an_unknown_on_finish_action_is_refused():
    with pytest.raises(ValueError, match="on_finish_action"):
        cleanup.check_on_finish_action("shred")

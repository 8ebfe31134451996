"""Each ending's words and its trigger event, made by its ``WaitResult`` constructor: a
deferred task resumes across releases, and users match these messages, so both stay as
every release has written them."""

from __future__ import annotations

import dataclasses
import json

import pytest

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import JobStatus
from airflow_volcano_wandb.wait.outcome import WaitResult

RUNNING = JobStatus("j", "ns", "u-1", "Running", None, retry_count=2)


def _event(result: WaitResult) -> dict:
    event = json.loads(json.dumps(result.to_event()))
    assert WaitResult.from_event(event) == result
    return event


def test_an_events_keys_are_the_results_fields_and_an_earlier_builds_keys_are_read() -> None:
    result = WaitResult.watch_lost("j", "ns", "u-1", "gone")
    assert list(_event(result)) == [field.name for field in dataclasses.fields(WaitResult)]
    earlier = {"outcome": "watch_lost", "name": "j", "namespace": "ns", "uid": "u-1"}
    assert WaitResult.from_event({**earlier, "message": result.message}) == result


@pytest.mark.parametrize("ending", [Ending.SUCCEEDED, Ending.FAILED, Ending.DELETED])
def test_a_jobs_own_end_is_the_outcome(ending) -> None:
    status = JobStatus("j", "ns", "u-1", "Completed", ending)
    assert WaitResult.from_status(status).outcome is ending


def test_a_lost_watch_keeps_its_event_and_words() -> None:
    result = WaitResult.watch_lost("j", "ns", "u-1", "connection refused")
    assert _event(result) == {
        "outcome": "watch_lost",
        "job_name": "j",
        "namespace": "ns",
        "job_uid": "u-1",
        "message": (
            "Lost the watch on Volcano job ns/j: connection refused. The job was left "
            "untouched; the next try reattaches to it."
        ),
        "phase": "",
        "retry_count": 0,
        "unplaced": {},
        "crash_loop": None,
        "stall": None,
        "start_failure": None,
        "metrics": {},
    }


def test_a_timeout_keeps_its_event_and_words() -> None:
    result = WaitResult.timed_out(RUNNING, "j", "ns", "u-1")
    assert _event(result) == {
        "outcome": "timeout",
        "job_name": "j",
        "namespace": "ns",
        "job_uid": "u-1",
        "message": "Gave up waiting on Volcano job ns/j: execution_timeout reached",
        "phase": "Running",
        "retry_count": 0,  # the restarts of a job that timed out are not its end's
        "unplaced": {},
        "crash_loop": None,
        "stall": None,
        "start_failure": None,
        "metrics": {},
    }


def test_a_gang_not_placed_keeps_its_event_and_words() -> None:
    result = WaitResult.not_placed(RUNNING, 60.0, {"worker": "1/2"})
    event = _event(result)
    assert event["outcome"] == "pending_timeout" and event["unplaced"] == {"worker": "1/2"}
    assert event["message"] == (
        "Volcano job ns/j did not have every rank placed and running within "
        "pending_timeout=60s (phase Running; ranks started: worker 1/2)"
    )
    assert (event["phase"], event["retry_count"]) == ("Running", 2)
    assert WaitResult.not_placed(RUNNING, 90.5, {}).message.endswith("=90.5s (phase Running)")


def test_the_kept_metrics_travel_in_the_event_and_an_earlier_builds_event_has_none() -> None:
    """The followed master log's sampled metrics (``training_progress.keep_metrics``) come back
    with the result; an event without them (a wait that followed no log, an earlier build's)
    reads as none, and one that is not a series is refused as any malformed event is."""
    kept = {"train/epoch_loss": [[100, 1.25], [200, 0.5]]}
    result = dataclasses.replace(
        WaitResult.from_status(JobStatus("j", "ns", "u-1", "Completed", Ending.SUCCEEDED)),
        metrics=kept,
    )
    event = _event(result)
    assert event["metrics"] == kept
    assert WaitResult.from_event({**event, "metrics": None}).metrics == {}
    with pytest.raises(ValueError, match="not a Volcano wait result"):
        WaitResult.from_event({**event, "metrics": {"loss": [[1]]}})

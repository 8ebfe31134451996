"""deadline.call_within: the call's answer, its error, or TimeoutError once time is up."""

from __future__ import annotations

import threading

import pytest

from airflow_volcano_wandb.wandb.deadline import call_within


def test_the_answer_in_time_is_returned() -> None:
    assert call_within(5, lambda a, b=0: a + b, 2, b=3) == 5


def test_the_calls_own_error_is_raised_here() -> None:
    def broken() -> None:
        raise LookupError("no such run")

    with pytest.raises(LookupError, match="no such run"):
        call_within(5, broken)


@pytest.mark.timeout(30)
def test_a_call_that_never_answers_is_abandoned_with_a_timeout_error() -> None:
    released = threading.Event()

    def stuck() -> None:
        released.wait()

    try:
        with pytest.raises(TimeoutError, match=r"stuck gave no answer within 0\.2 s"):
            call_within(0.2, stuck)
        [thread] = [t for t in threading.enumerate() if t.name.endswith("stuck")]
        assert thread.daemon  # abandoned, it cannot keep the process alive
    finally:
        released.set()

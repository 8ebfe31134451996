"""A master silent on stdout but whose online W&B run advances is not stalled.

A trainer may log only to W&B. On the local cluster the simulated master prints its start
lines and then nothing (``testing/cluster/podlogs.py``), the silence ``stall_timeout`` looks
for; its W&B run is the stand-in's (``test_support/wandb_standin.py``, read through the real
``wandb`` SDK), whose step the test advances and then stops advancing: the deferred operator's
trigger and the poking sensor each hear it through the run, then fail the job once it is quiet
too.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator

import pytest

from airflow_volcano_wandb.exceptions import TrainingStalledError
from airflow_volcano_wandb.job.ownership import WANDB_RUN_LABEL
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, list_jobs, seed_template, submit_job, wait_until
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import API_KEY, ENTITY, PROJECT, STANDIN_CONN_ID, online_standin_run

pytestmark = pytest.mark.cluster

RUN_ID = "stall-wandb-run"
STALL_TIMEOUT = 4
#: How long the run's step advances (once a second): past the master's own stall_timeout of
#: silence, so only the W&B run keeps the wait going meanwhile.
ADVANCING = 14


class Lines(logging.Handler):
    """The trigger's log lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture
def standin(wandb_standin: WandbStandin) -> WandbStandin:
    """The stand-in with the run, at step 0."""
    wandb_standin.add_run(ENTITY, PROJECT, RUN_ID, summary={"_step": 0, "_timestamp": time.time()})
    return wandb_standin


@contextlib.contextmanager
def advancing(standin: WandbStandin) -> Iterator[threading.Event]:
    """The run logs a step every second for ``ADVANCING`` seconds; the event is set when it
    stops (or the block ends)."""
    stop = threading.Event()

    def advance() -> None:
        step = 0
        while not stop.wait(1.0):
            step += 1
            standin.log_step(ENTITY, PROJECT, RUN_ID, step)

    thread = threading.Thread(target=advance, daemon=True)
    timer = threading.Timer(ADVANCING, stop.set)
    thread.start()
    timer.start()
    try:
        yield stop
    finally:
        stop.set()
        timer.cancel()
        thread.join()


@contextlib.contextmanager
def logged(name: str) -> Iterator[tuple[logging.Logger, Lines]]:
    log, lines = logging.getLogger(name), Lines()
    log.addHandler(lines)
    log.setLevel(logging.INFO)
    try:
        yield log, lines
    finally:
        log.removeHandler(lines)


def _assert_heard_then_stalled(log: str, standin: WandbStandin, error: TrainingStalledError):
    # While the run advanced, the silent master was heard through it, and not failed.
    saved = [line for line in log.splitlines() if "not stalled" in line]
    assert saved and f"W&B run {RUN_ID} logged step" in saved[0], log
    # Then the run stopped advancing too: the stall names its last step.
    last_step = standin.run(ENTITY, PROJECT, RUN_ID).summary["_step"]
    assert error.wandb_step == last_step and error.stall_timeout == STALL_TIMEOUT
    assert f"its W&B run's last step, {last_step}, was logged at" in str(error), str(error)


def test_a_silent_master_whose_standin_run_advances_is_not_stalled_until_it_stops_with_a_stub_ti(
    cluster, standin
):
    api, namespace = cluster
    op = support.operator(
        namespace=namespace,
        template=seed_template(master={SIM_DURATION: "60"}, worker={SIM_DURATION: "600"}),
        deferrable=True,
        stall_timeout=STALL_TIMEOUT,
        **online_standin_run(RUN_ID),
    )
    ti = support.StubTaskInstance("avw_stall_wandb", "train", "wandb")
    trigger = support.execute_operator(op, ti)
    kwargs = trigger.serialize()[1]
    assert (kwargs["wandb_conn_id"], kwargs["wandb_run_id"]) == (STANDIN_CONN_ID, RUN_ID)
    assert API_KEY not in json.dumps(kwargs)
    with logged("avw.test.stall_wandb.trigger") as (log, lines), advancing(standin) as stop:
        trigger._log = log
        events = asyncio.run(support.collect_events(trigger, timeout=50))
        ended_after_the_run_stopped = stop.is_set()
    assert ended_after_the_run_stopped, events
    assert [event["outcome"] for event in events] == ["stalled"]
    with pytest.raises(TrainingStalledError) as failure:
        op.execute_complete(support.context_for(ti), events[0], run=None)
    _assert_heard_then_stalled("\n".join(lines.lines), standin, failure.value)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_the_poking_sensor_hears_the_standin_run_the_job_names_the_same_way_with_a_stub_ti(
    cluster, standin, capfd
):
    api, namespace = cluster
    job = submit_job(api, namespace, "sensed", master_seconds=60, labels={WANDB_RUN_LABEL: RUN_ID})
    with advancing(standin) as stop:
        with pytest.raises(TrainingStalledError) as failure:
            support.poke_until_verdict(
                job,
                namespace,
                "avw_stall_wandb",
                timeout=50,
                wandb_conn_id=STANDIN_CONN_ID,
                stall_timeout=STALL_TIMEOUT,
                wandb_mode="online",
            )
        ended_after_the_run_stopped = stop.is_set()
    assert ended_after_the_run_stopped, failure.value
    # The task's log: Airflow routes it through structlog, to the console here.
    captured = capfd.readouterr()
    _assert_heard_then_stalled(captured.out + captured.err, standin, failure.value)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")

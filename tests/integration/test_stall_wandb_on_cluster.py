"""A master silent on stdout but whose online W&B run advances is not stalled.

A trainer may log only to W&B. On the local cluster the simulated master prints its start
lines and then nothing (``testing/cluster/podlogs.py``), the silence ``stall_timeout`` looks
for; its W&B run is the stand-in's (``tests/wandb_standin.py``, read through the real ``wandb``
SDK), whose step the test advances and then stops advancing.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time

import pytest

from airflow_volcano_wandb.exceptions import TrainingStalledError
from tests.integration.jobs import SIM_DURATION, list_jobs, seed_template, wait_until
from tests.reliability.support import (
    StubTaskInstance,
    collect_events,
    context_for,
    execute_operator,
    operator,
)
from tests.wandb_standin import WandbStandin

pytestmark = pytest.mark.cluster

API_KEY = "standin" + "0123456789abcdef" * 3
ENTITY, PROJECT, RUN_ID = "ml-team", "retraining", "stall-wandb-run"
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


def _advance(standin: WandbStandin, stop: threading.Event) -> None:
    step = 0
    while not stop.wait(1.0):
        step += 1
        standin.log_step(ENTITY, PROJECT, RUN_ID, step)


def test_a_silent_master_whose_wandb_run_advances_is_not_stalled_until_it_stops_against_wandb_standin(  # noqa: E501
    cluster, monkeypatch
):
    api, namespace = cluster
    with WandbStandin(api_key=API_KEY) as standin:
        standin.add_run(ENTITY, PROJECT, RUN_ID, summary={"_step": 0, "_timestamp": time.time()})
        connection = {
            "conn_type": "wandb",
            "host": standin.url,
            "password": API_KEY,
            "extra": {"entity": ENTITY, "project": PROJECT},
        }
        monkeypatch.setenv("AIRFLOW_CONN_WANDB_STALL", json.dumps(connection))
        monkeypatch.delenv("WANDB_API_KEY", raising=False)
        op = operator(
            namespace=namespace,
            template=seed_template(master={SIM_DURATION: "60"}, worker={SIM_DURATION: "600"}),
            deferrable=True,
            stall_timeout=STALL_TIMEOUT,
            wandb_conn_id="wandb_stall",
            wandb_entity=ENTITY,
            wandb_project=PROJECT,
            wandb_mode="online",
            wandb_run_id=RUN_ID,
        )
        ti = StubTaskInstance("avw_stall_wandb", "train", "wandb")
        trigger = execute_operator(op, ti)
        kwargs = trigger.serialize()[1]
        assert (kwargs["wandb_conn_id"], kwargs["wandb_run_id"]) == ("wandb_stall", RUN_ID)
        assert API_KEY not in json.dumps(kwargs)
        lines = Lines()
        trigger_log = logging.getLogger("avw.test.stall_wandb")
        trigger_log.addHandler(lines)
        trigger_log.setLevel(logging.INFO)
        trigger._log = trigger_log

        stop = threading.Event()
        advancing = threading.Thread(target=_advance, args=(standin, stop), daemon=True)
        advancing.start()
        threading.Timer(ADVANCING, stop.set).start()
        try:
            events = asyncio.run(collect_events(trigger, timeout=50))
            ended_after_the_run_stopped = stop.is_set()
        finally:
            stop.set()
            advancing.join()
            trigger_log.removeHandler(lines)
        # While the run advanced, the silent master was heard through it, and not failed.
        assert ended_after_the_run_stopped, events
        assert [event["outcome"] for event in events] == ["stalled"]
        saved = [line for line in lines.lines if "not stalled" in line]
        assert saved and f"W&B run {RUN_ID} logged step" in saved[0], lines.lines
        # Then the run stopped advancing too: the stall names its last step.
        last_step = standin.run(ENTITY, PROJECT, RUN_ID).summary["_step"]
        assert events[0]["stall"]["wandb_step"] == last_step
        with pytest.raises(TrainingStalledError) as failure:
            op.execute_complete(context_for(ti), events[0], run=None)
    error = failure.value
    assert error.wandb_step == last_step and error.stall_timeout == STALL_TIMEOUT
    assert f"its W&B run's last step, {last_step}, was logged at" in str(error), str(error)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")

"""A training's progress in the waiting task's log: step, percentage, rate and ETA.

The simulated master trains on the local cluster while its W&B run (the stand-in's, read
through the real ``wandb`` SDK) reports its step and total steps as the progress contract says
(docs/trainer.md). The deferred operator's trigger and the poking sensor each read the run's
summary every ``progress_interval`` (2 s here, a minute by default) and log a progress line;
neither follows the master's log.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator

import pytest

from airflow_volcano_wandb.job.ownership import WANDB_RUN_LABEL
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, seed_template, submit_job
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import ENTITY, PROJECT, STANDIN_CONN_ID, online_standin_run
from tests.integration.test_stall_wandb_on_cluster import logged

pytestmark = pytest.mark.cluster

RUN_ID = "progress-run"
TOTAL_STEPS = 600
#: Steps the run logs per second, and for how long the master trains: a tenth of the steps
#: every 3 s, so about 4 lines in 14 s, where the tests need 2 with a rate (the first has none).
RATE, TRAINS_FOR = 20, 14
LINE = re.compile(
    rf"^progress: step (\d+)/{TOTAL_STEPS} \((\d+) %\), epoch \d+/3, [\d.]+ steps/s, ETA [\d.]+ "
    r"(s|min), eval/accuracy=[\d.]+$"
)


@pytest.fixture
def training(wandb_standin: WandbStandin, monkeypatch) -> Iterator[WandbStandin]:
    """The run, logging ``RATE`` steps a second with its totals, while the test lasts."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__PROGRESS_INTERVAL", "2")
    wandb_standin.add_run(ENTITY, PROJECT, RUN_ID, summary={}, state="running")
    done = threading.Event()

    def train() -> None:
        step = 0
        while not done.wait(1.0) and step < TOTAL_STEPS:
            step += RATE
            logged = {
                "train/step": step,
                "train/total_steps": TOTAL_STEPS,
                "epoch": 1 + 3 * step // (TOTAL_STEPS + 1),
                "train/epochs": 3,
                "eval/accuracy": 0.5 + step / (4 * TOTAL_STEPS),
            }
            wandb_standin.log_step(ENTITY, PROJECT, RUN_ID, step, **logged)

    thread = threading.Thread(target=train, daemon=True)
    thread.start()
    try:
        yield wandb_standin
    finally:
        done.set()
        thread.join()


def _assert_rising_progress(lines: list[str]) -> None:
    shown = [m for line in lines if (m := LINE.match(line))]
    assert len(shown) >= 2, lines
    percents = [int(m[2]) for m in shown]
    assert percents == sorted(percents) and percents[0] < percents[-1], lines


def test_the_deferred_operator_logs_its_trainings_progress_with_a_stub_ti_on_the_standin(
    cluster, training
):
    _, namespace = cluster
    op = support.operator(
        namespace=namespace,
        template=seed_template(master={SIM_DURATION: str(TRAINS_FOR)}, worker={SIM_DURATION: "1"}),
        deferrable=True,
        **online_standin_run(RUN_ID),
        wandb_summary_keys=["eval/accuracy"],
    )
    ti = support.StubTaskInstance("avw_progress", "train", "deferred")
    trigger = support.execute_operator(op, ti)
    assert not trigger.spec.follow_master_log
    with logged("avw.test.progress.trigger") as (log, lines):
        trigger._log = log
        events = asyncio.run(support.collect_events(trigger, timeout=120))
    assert [event["outcome"] for event in events] == ["succeeded"]
    _assert_rising_progress(lines.lines)


def test_the_poking_sensor_logs_the_same_progress_with_a_stub_ti_on_the_standin(
    cluster, training, capfd
):
    api, namespace = cluster
    job = submit_job(
        api, namespace, "sensed", master_seconds=TRAINS_FOR, labels={WANDB_RUN_LABEL: RUN_ID}
    )
    support.poke_until_verdict(
        job,
        namespace,
        "avw_progress",
        timeout=120,
        wandb_conn_id=STANDIN_CONN_ID,
        wandb_mode="online",
        wandb_summary_keys=["eval/accuracy"],
    )
    # The task log: Airflow routes it through structlog, to the console here.
    captured = capfd.readouterr()
    lines = [
        text[text.index("progress: ") :].split(" [")[0].rstrip()
        for text in (captured.out + captured.err).splitlines()
        if "progress: step" in text
    ]
    _assert_rising_progress(lines)

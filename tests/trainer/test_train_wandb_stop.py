"""A run stopped in the W&B UI ends the example trainer with the stop exit code, which the
provider reads as a stop (against the W&B stand-in)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import NoReturn

import pytest

from airflow_volcano_wandb.wait.wandb_stop import (
    STOPPED_FROM_WANDB_EXIT_CODE,
    STOPPED_FROM_WANDB_MARKER,
)
from airflow_volcano_wandb.wandb.wandb_env import container_env
from test_support.trainer_runs import (
    AIRFLOW_CTX,
    FAKE_API_KEY,
    RUN_TIMEOUT_S,
    TRAIN_PY,
    _base_env,
    _resolve,
)
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import keyed_run_spec


def test_a_run_stopped_in_the_wandb_ui_ends_the_trainer_with_the_stop_exit_code_on_the_standin(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    """The seed's "stop" button: an online run against the W&B stand-in is stopped while it
    trains (the stand-in's file stream answers ``stopped``, as W&B's does), the SDK calls the
    trainer's ``stop_fn``, and the trainer finishes the run and exits with the documented code
    the provider turns into ``StoppedFromWandbError``.

    The trainer logs at a rate a real job does (a few records a second): one that logs every
    one of thousands of tiny steps a second backs wandb-core up, and the SDK's question "was
    the run stopped?" then waits behind the backlog (docs/trainer.md)."""
    spec = keyed_run_spec(AIRFLOW_CTX, project="volcano-demo", entity="ml-team", mode="online")
    with WandbStandin(api_key=FAKE_API_KEY) as standin:
        env = {
            **_base_env(tmp_path),
            **_resolve(container_env(spec, is_master_task=True), "job-master-0"),
            "WANDB_BASE_URL": standin.url,
            "TRAIN_EPOCHS": "1000000",  # trains until it is stopped
            # Epochs of 4,096 steps, the loss logged every 2,048 and the evaluation each
            # epoch: a few records a second at this trainer's speed, as a real job logs.
            "TRAIN_TRAIN_SAMPLES": "262144",
            "TRAIN_LOG_EVERY": "2048",
            # A pod's /dev/termination-log, which the kubelet turns into the termination message.
            "AVW_TERMINATION_LOG": str(tmp_path / "termination-log"),
        }
        log = tmp_path / "rank-0.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, str(TRAIN_PY)],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        try:
            # Stopped once it trains: its first history has reached the file stream.
            deadline = time.monotonic() + RUN_TIMEOUT_S

            def streamed_history() -> bool:
                streams = standin.file_streams(spec.run_id)
                return any("wandb-history.jsonl" in r.variables["files"] for r in streams)

            while not streamed_history():
                assert proc.poll() is None, log.read_text()[-4000:]
                assert time.monotonic() < deadline, "the run never streamed its history"
                time.sleep(0.5)
            standin.stop_run("ml-team", "volcano-demo", spec.run_id)
            code = _wait_for_stop(proc, standin, spec.run_id, log, stopped_at=time.monotonic())
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        output = log.read_text()
        streams = [r.status for r in standin.file_streams(spec.run_id)]
        told = standin.stop_told_by(spec.run_id)
        unauthorized = [r.path for r in standin.requests if r.status == 401]
    assert code == trainer.stopping.STOPPED_FROM_WANDB_EXIT_CODE == STOPPED_FROM_WANDB_EXIT_CODE, (
        f"exited {code}:\n{output[-4000:]}"
    )
    # W&B tells a run that it was stopped in its file stream's answers, nowhere else.
    assert told and all(r.path.endswith("/file_stream") for r in told), told
    assert "stopped from the W&B UI or API" in output and "AVW_TRAIN_RESULT" not in output
    message = (tmp_path / "termination-log").read_text()
    assert message.startswith(trainer.stopping.STOPPED_FROM_WANDB_MARKER), message
    assert set(streams) == {200} and unauthorized == [], (streams, unauthorized)
    assert FAKE_API_KEY not in output


#: How long W&B may take to tell the run it was stopped: wandb-core posts the file stream
#: (whose answer carries the stop) every 15 s; a loaded machine can stretch that.
STOP_DELIVERED_S = 60
#: How long the trainer may take to act on a delivered stop: the SDK asks wandb-core every
#: 15 s, then the trainer finishes its run, flushing what it logged, and exits.
STOP_HEEDED_S = 60


def _wait_for_stop(
    proc: subprocess.Popen[str], standin: WandbStandin, run_id: str, log: Path, stopped_at: float
) -> int:
    """The trainer's exit code, once the stop has reached it; failing at once, with what the
    stand-in received when and the trainer's last lines, when W&B's answer has not told the
    run within ``STOP_DELIVERED_S`` or the trainer has not exited ``STOP_HEEDED_S`` after."""
    delivered = None
    while delivered is None and proc.poll() is None:
        if told := standin.stop_told_by(run_id):
            delivered = told[0].received_at
        elif time.monotonic() - stopped_at > STOP_DELIVERED_S:
            _fail(
                standin, run_id, log, stopped_at, f"no answer said stopped in {STOP_DELIVERED_S} s"
            )
        else:
            time.sleep(0.2)
    try:
        return proc.wait(timeout=max(1.0, (delivered or 0) + STOP_HEEDED_S - time.monotonic()))
    except subprocess.TimeoutExpired:
        _fail(standin, run_id, log, stopped_at, f"not stopped {STOP_HEEDED_S} s after it was told")


def _fail(standin: WandbStandin, run_id: str, log: Path, stopped_at: float, why: str) -> NoReturn:
    received: dict[str, int] = {}
    for request in standin.requests:
        name = request.operation or request.path.partition("?")[0]
        received[name] = received.get(name, 0) + 1
    streams = [
        (
            round(r.received_at - stopped_at, 1),
            r.variables.get("files"),
            "stopped" if r.told_stopped else "running",
        )
        for r in standin.file_streams(run_id)
    ]
    pytest.fail(
        f"the trainer's W&B run was stopped; {why}.\n"
        f"The stand-in received: {received}\n"
        f"The file streams (s after the stop, files, answer): {streams}\n"
        f"The trainer's last lines:\n{log.read_text()[-3000:]}",
        pytrace=False,
    )


def test_the_trainer_and_the_provider_agree_on_the_stop_exit_code(trainer: SimpleNamespace) -> None:
    assert trainer.stopping.STOPPED_FROM_WANDB_EXIT_CODE == STOPPED_FROM_WANDB_EXIT_CODE
    assert trainer.stopping.STOPPED_FROM_WANDB_MARKER == STOPPED_FROM_WANDB_MARKER


RACE = """
import sys, threading
sys.path.insert(0, sys.argv[1])
import stopping

def main():
    try:
        stopping._STOPPED_FROM_WANDB.set()  # the SDK thread set the flag...
        stopping.handling_wandb_stop()  # ...the loop saw it first and ends itself (training.py)
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        stopping.handling_wandb_stop()  # train.py's handler
        late = threading.Thread(target=stopping.stop_from_wandb)  # ...then the SDK interrupts
        late.start()
        late.join()
        sum(range(10**6))  # the handling goes on: the termination message, the run's finish
        return stopping.STOPPED_FROM_WANDB_EXIT_CODE

sys.exit(main())
"""


def test_the_sdks_late_interrupt_does_not_cut_the_handling_of_a_wandb_stop_short() -> None:
    """The race a CI run met: the SDK's ``stop_fn`` sets its flag, the training loop sees it
    and ends itself, and the interrupt the ``stop_fn`` sends next lands in ``train.py``'s
    handling of the stop, which then exited 1."""
    done = subprocess.run(
        [sys.executable, "-c", RACE, str(TRAIN_PY.parent)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == STOPPED_FROM_WANDB_EXIT_CODE, done.stderr

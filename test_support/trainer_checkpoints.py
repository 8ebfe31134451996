"""The example trainer's checkpoints as its tests read them: the file names, the steps of an epoch,
a worker stopped after an epoch, the loss a run ended on.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

from test_support.trainer_runs import (
    RUN_TIMEOUT_S,
    _load_run,
    _start_job,
    _wait_job,
)

STEPS_PER_EPOCH = 32  # 4096 samples over 2 ranks, batches of 64: the defaults
CHECKPOINT_FILE = "step-{:09d}.pt"


def stop_worker_after_an_epoch(run_dir: Path, envs: list[dict[str, str]]) -> list[Any]:
    """Start a job of a master and a worker, and once it trained an epoch send SIGTERM to the
    worker pod only (rank 0 learns it in the step's all-reduce); the job's results."""
    run_dir.mkdir()
    procs = _start_job(run_dir, envs)
    try:
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while "epoch 1/" not in procs[0][1].read_text():  # it trains
            assert all(proc.poll() is None for proc, _ in procs), procs[0][1].read_text()[-3000:]
            assert time.monotonic() < deadline, "the trainer never finished an epoch"
            time.sleep(0.2)
        procs[1][0].send_signal(signal.SIGTERM)
    finally:
        stopped = _wait_job(procs)
    return stopped


def _history_steps(run_dir: Path) -> list[int]:
    return [row["train/step"] for row in _load_run(run_dir).history if "train/loss" in row]


def _final_loss(run_dir: Path) -> float:
    return [row["train/loss"] for row in _load_run(run_dir).history if "train/loss" in row][-1]

"""12. What a resume saves (issue 23; local processes, no cluster): the example trainer (2
ranks over gloo, as the provider runs a job with ``checkpoint_volume``, or ``artifact``: with
``checkpoint_artifact`` against the W&B stand-in) gets SIGTERM on its worker after
``--resume-train-s`` s, as a preempted pod does; the next try's job resumes the same run.
Medians of ``--resume-repeat`` runs of each, in turns; the figures: docs/performance.md.
"""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import REPO

from airflow_volcano_wandb.job import resume
from airflow_volcano_wandb.testing.cluster.process import free_ports
from test_support.wandb_standin import WandbStandin

KEYS = ("resume",)
OPTIONS = {
    "resume_train_s": (20.0, 5.0, "training before the stop (s)"),
    "resume_repeat": (3, 1, "runs of each, for medians"),
}
TRAIN_PY = REPO / "docker" / "trainer" / "train.py"
TIMEOUT_S = 600
#: The local "job": 2 ranks, counted as if each held one GPU.
RANKS = 2
RUN_ID = "run1"
ENTITY, PROJECT, API_KEY = "bench", "resume", "bench-key-" + "0" * 40


def _start(work: Path, envs: list[dict[str, str]], tag: str) -> list[tuple[subprocess.Popen, Path]]:
    """The 2 ranks of one job (``envs``: each rank's own), each logging to a file of its own."""
    (port,) = free_ports(1)
    drop = ("WANDB_", "AIRFLOW_CTX_", "AVW_", "TRAIN_", "MASTER_", "LOCAL_RANK")
    base = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    procs = []
    for rank, env in enumerate(envs):
        log = work / f"{tag}-{rank}.log"
        rank_env = {**base, **env, "WANDB_DIR": str(work), "OMP_NUM_THREADS": "1"}
        rank_env |= {"PYTHONUNBUFFERED": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
        rank_env |= {"WORLD_SIZE": str(RANKS), "RANK": str(rank)}
        with log.open("w") as out:
            cmd = [sys.executable, str(TRAIN_PY)]
            proc = subprocess.Popen(cmd, cwd=work, env=rank_env, stdout=out, stderr=out)
        procs.append((proc, log))
    return procs


def _wait_for(log: Path, pattern: str, procs: list) -> re.Match[str]:
    deadline = time.monotonic() + TIMEOUT_S
    while (found := re.search(pattern, log.read_text())) is None:
        if any(proc.poll() is not None for proc, _ in procs) or time.monotonic() > deadline:
            raise RuntimeError(f"no {pattern!r} in {log}:\n{log.read_text()[-3000:]}")
        time.sleep(0.05)
    return found


def _stop(procs: list) -> None:
    for proc, _ in procs:
        try:
            proc.wait(timeout=TIMEOUT_S)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _artifact_envs(standin: WandbStandin, work: Path, tag: str) -> list[dict[str, str]]:
    """``checkpoint_artifact``: each rank a directory of its own, new for each try (a pod's
    ``emptyDir``); rank 0 online, the worker without W&B, as the operator gives them."""
    common = {"AVW_CHECKPOINT_ARTIFACT": f"checkpoint-{RUN_ID}"}
    master = {**common, "WANDB_MODE": "online", "WANDB_API_KEY": API_KEY}
    master |= {"WANDB_BASE_URL": standin.url, "WANDB_ENTITY": ENTITY, "WANDB_PROJECT": PROJECT}
    master |= {"WANDB_RUN_ID": RUN_ID, "WANDB_RESUME": "allow" if tag == "first" else "must"}
    master["AVW_CHECKPOINT_DIR"] = str(work / f"{tag}-pod-0" / RUN_ID)
    worker = {**common, "WANDB_MODE": "disabled", "AVW_CHECKPOINT_DIR": str(work / f"{tag}-pod-1")}
    return [master, worker]


def measure(train_s: float, store: str = "volume") -> dict[str, Any]:
    """One stop and resume with the checkpoints kept as ``store`` says (``volume`` or
    ``artifact``)."""
    with tempfile.TemporaryDirectory(prefix="avw-resume-bench-") as tmp:
        work = Path(tmp)
        standin = WandbStandin(api_key=API_KEY).start() if store == "artifact" else None
        try:
            return _stop_and_resume(work, train_s, standin)
        finally:
            if standin is not None:
                standin.stop()


def _stop_and_resume(work: Path, train_s: float, standin: WandbStandin | None) -> dict[str, Any]:
    common = {
        "TRAIN_EPOCHS": "1000000",
        "AVW_RESUME_FROM": "latest",
        "AVW_CHECKPOINT_EVERY": "1000000000",  # the only checkpoint is the stop's
    }

    def envs(tag: str) -> list[dict[str, str]]:
        if standin is not None:
            return [{**common, **env} for env in _artifact_envs(standin, work, tag)]
        # checkpoint_volume: both ranks see one directory (the claim), whatever the try.
        return [
            {**common, "WANDB_MODE": "disabled", "AVW_CHECKPOINT_DIR": str(work / "claim" / RUN_ID)}
        ] * 2

    first = _start(work, envs("first"), "first")
    try:
        _wait_for(first[0][1], r"epoch 1/", first)
        time.sleep(train_s)
        killed_at = time.monotonic()
        first[1][0].send_signal(signal.SIGTERM)  # the worker's pod is deleted
    finally:
        _stop(first)
    before = int(_wait_for(first[0][1], r"stopping after step (\d+)", []).group(1))
    if standin is not None:  # W&B has the run the first job started: the next one resumes it
        standin.add_run(ENTITY, PROJECT, RUN_ID, summary={})
    # The next try: a new job on the same run id, so the same checkpoints.
    resumed = _start(work, envs("resumed"), "resumed")
    try:
        _wait_for(resumed[0][1], r"resumed from step .* s of training", resumed)
        overhead = time.monotonic() - killed_at
    finally:
        for proc, _ in resumed:
            proc.send_signal(signal.SIGTERM)
        _stop(resumed)
    said = resume.resumed_step(resumed[0][1].read_text())
    if said is None or said.trained_seconds is None:
        raise RuntimeError(f"no resume line with seconds in {resumed[0][1]}")
    steps = {"steps_before_kill": before, "resumed_from_step": said.step}
    steps |= {"steps_repeated": before - said.step, "resume_overhead_s": round(overhead, 2)}
    seconds = {"saved_training_s": said.trained_seconds}
    return (
        steps | seconds | {"saved_gpu_seconds": resume.saved_gpu_seconds(*seconds.values(), RANKS)}
    )


def run(ctx) -> dict:
    """The volume's figures (at the top) and the artifact's, each the median of
    ``--resume-repeat`` runs, taken in turns so both see the same machine."""
    train_s, repeat = ctx.resume_train_s, ctx.resume_repeat
    runs: dict[str, list[dict[str, Any]]] = {"volume": [], "artifact": []}
    for _ in range(repeat):
        for store, results in runs.items():
            results.append(measure(train_s, store))
    volume, artifact = (
        {key: statistics.median(r[key] for r in runs[store]) for key in runs[store][0]}
        for store in ("volume", "artifact")
    )
    ratio = round(artifact["resume_overhead_s"] / volume["resume_overhead_s"], 2)
    return {
        "resume": {**volume, "artifact": artifact, "artifact_overhead_ratio": ratio}
        | {"repeat": repeat, "train_s": train_s}
    }


def section(r: dict) -> list[str]:
    o = r["resume"]
    said = [
        f"The example trainer (2 local ranks over gloo) trained {o['train_s']} s, its worker got "
        f"SIGTERM (a preempted pod): it stopped after step {o['steps_before_kill']} and saved "
        f"it; the next try's job on the same run resumed from step {o['resumed_from_step']} "
        f"(`steps_repeated` {o['steps_repeated']}) {o['resume_overhead_s']} s after the SIGTERM "
        "(stop, save, new processes, torch import, rendezvous, load; a cluster's scheduling, "
        "image start and `retry_delay` come on top). Without resume the next try starts from "
        "step 0: every step before the stop is trained again."
    ]
    if "saved_gpu_seconds" in o:  # since the trainer says its seconds
        said.append(
            f" The checkpoint held {o['saved_training_s']} s of training: "
            f"{o['saved_gpu_seconds']} GPU-seconds saved, as if each rank held one GPU."
        )
    if artifact := o.get("artifact"):
        said.append(
            " With the checkpoints in a W&B artifact instead (no shared volume; the W&B stand-in "
            f"on this machine, so no upload time): resumed from step "
            f"{artifact['resumed_from_step']} {artifact['resume_overhead_s']} s after the "
            f"SIGTERM, {o['artifact_overhead_ratio']}x the volume's (medians of {o['repeat']} "
            "runs each, in turns)."
        )
    return ["".join(said)]

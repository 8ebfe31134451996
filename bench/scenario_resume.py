"""12. Resume: the example trainer stopped by SIGTERM as a preempted pod is, then resumed on
its run's checkpoints, on a volume and in a W&B artifact (``resume_bench.py``, in a child
process; local processes, no cluster)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from common import PY, REPO


def resume(work: Path, train_s: float, repeat: int) -> dict:
    """The example trainer stopped as a preempted pod is and resumed on its run's checkpoints,
    on a volume and in a W&B artifact side by side, measured by ``bench/resume_bench.py`` in a
    child process."""
    out = work / "resume.json"
    argv = [PY, str(REPO / "bench" / "resume_bench.py"), "--train-s", str(train_s)]
    argv += ["--repeat", str(repeat)]
    subprocess.run([*argv, "--out", str(out)], check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def md_resume(r: dict) -> list[str]:
    o = r["resume"]
    return [
        "## Resume on the same run",
        "",
        f"The example trainer (2 local ranks over gloo) trained {o['train_s']} s, its worker got "
        f"SIGTERM (a preempted pod): it stopped after step {o['steps_before_kill']} and saved "
        f"it; the next try's job on the same run resumed from step {o['resumed_from_step']} "
        f"(`steps_repeated` {o['steps_repeated']}) {o['resume_overhead_s']} s after the SIGTERM "
        "(stop, save, new processes, torch import, rendezvous, load; a cluster's scheduling, "
        "image start and `retry_delay` come on top). Without resume the next try starts from "
        "step 0: every step before the stop is trained again."
        + (
            f" The checkpoint held {o['saved_training_s']} s of training: "
            f"{o['saved_gpu_seconds']} GPU-seconds saved, as if each rank held one GPU."
            if "saved_gpu_seconds" in o
            else ""
        )
        + (
            f" With the checkpoints in a W&B artifact instead (no shared volume; the W&B "
            f"stand-in on this machine, so no upload time): resumed from step "
            f"{o['artifact']['resumed_from_step']} {o['artifact']['resume_overhead_s']} s after "
            f"the SIGTERM, {o['artifact_overhead_ratio']}x the volume's (medians of "
            f"{o['repeat']} runs each, in turns)."
            if "artifact" in o
            else ""
        ),
    ]

"""Where the example trainer resumes from: the same checkpoint on every rank.

``AVW_RESUME_FROM`` names a checkpoint, or ``latest``: the newest complete one in
``AVW_CHECKPOINT_DIR``, which rank 0 resolves and tells the others. With
``AVW_CHECKPOINT_ARTIFACT`` (pods without a shared volume) rank 0 also looks in that W&B
artifact, downloads its version when it is newer, and sends the file to the other ranks
(``checkpoint_artifact.py`` is W&B's side).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from checkpoints import (
    CHECKPOINT_DIR_ENV,
    CHECKPOINT_NAME,
    RESUME_FROM_ENV,
    RESUME_LATEST,
    CheckpointPlan,
    Progress,
    checkpoint_path,
    latest_checkpoint,
    move_into_place,
    read_checkpoint,
    temporary_path,
)
from hyperparameters import HyperParams
from process_group import DistInfo, broadcast_bytes, sum_over_ranks


def _download_into_place(version: Any, final: Path) -> None:
    """Download an artifact version's checkpoint onto ``final`` atomically: into a directory
    beside it whose name is no checkpoint's, then moved into place."""
    import checkpoint_artifact

    staging = final.with_name(f".{final.name}.{os.getpid()}.download")
    try:
        move_into_place(checkpoint_artifact.download(version, staging), final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def latest_on_rank_0(plan: CheckpointPlan, run: Any) -> tuple[int, str]:
    """Rank 0's ``latest``: the step of the newest complete local checkpoint (a volume, or a
    restarted container's own directory) or, when the artifact's latest version is as new or
    newer, that version's (downloaded if newer; W&B records that the run used it). Returns
    ``(step, name for the log)``, ``(-1, "")`` for no checkpoint at all."""
    assert plan.directory is not None  # checkpoint_plan refuses latest without a directory
    local = latest_checkpoint(plan.directory)
    step = int(CHECKPOINT_NAME.match(local.name)[1]) if local is not None else -1
    source = str(local) if local is not None else ""
    if not plan.artifact:
        return step, source
    # Beside this file in the image; only rank 0 of a run with the artifact needs it.
    import checkpoint_artifact

    version = checkpoint_artifact.newest_version(run, plan.artifact)
    if version is not None and int(version.metadata["step"]) >= step:
        run.use_artifact(version)
        if int(version.metadata["step"]) > step:
            step = int(version.metadata["step"])
            _download_into_place(version, checkpoint_path(plan.directory, step))
        source = checkpoint_artifact.version_name(version)
    return step, source


def share_checkpoint(path: Path, info: DistInfo) -> None:
    """Send rank 0's checkpoint to the ranks that do not have it (pods without a shared
    volume), each writing it atomically into its own directory; nothing when all have it."""
    lacking = torch.tensor([0.0 if path.is_file() else 1.0], device=info.device)
    if sum_over_ranks(lacking, info).item() == 0:
        return
    content = broadcast_bytes(path.read_bytes() if info.rank == 0 else b"", info)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = temporary_path(path)
        try:
            temporary.write_bytes(content)
            move_into_place(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)


def resume_checkpoint(
    plan: CheckpointPlan, info: DistInfo, run: Any = None
) -> tuple[Path, str] | None:
    """The checkpoint to resume from and its name for the log, the same on every rank: rank 0
    resolves ``latest`` and tells the others its step, so ranks never start from different
    steps; with an artifact it also sends the file to ranks without it."""
    if plan.resume_from is None:
        return None
    if plan.resume_from != RESUME_LATEST:
        path = Path(plan.resume_from)
        if not path.is_file():
            raise SystemExit(f"{RESUME_FROM_ENV}: no checkpoint at {path}")
        return path, str(path)
    assert plan.directory is not None  # checkpoint_plan refuses latest without a directory
    step, source = latest_on_rank_0(plan, run) if info.rank == 0 else (-1, "")
    if info.distributed:
        agreed = torch.tensor([step], dtype=torch.int64, device=info.device)
        dist.broadcast(agreed, src=0)
        step = int(agreed.item())
        source = broadcast_bytes(source.encode(), info).decode()
    if step < 0:
        return None
    path = checkpoint_path(plan.directory, step)
    if plan.artifact and info.distributed:
        share_checkpoint(path, info)
    if not path.is_file():
        raise SystemExit(
            f"rank 0 resumes from {path}, which rank {info.rank} cannot read: every rank must "
            f"see the same {CHECKPOINT_DIR_ENV} (a shared volume)"
        )
    return path, source


def load_checkpoint(
    path: Path, params: HyperParams, model: nn.Module, optimizer: torch.optim.Optimizer
) -> Progress:
    """Restore the model, optimizer and RNG from ``path``; return the progress it records."""
    state = read_checkpoint(path)
    saved = dict(state["hyper_params"])
    # More epochs may continue a run; any other change would not train the model it saved.
    differ = sorted(k for k, v in asdict(params).items() if k != "epochs" and saved.get(k) != v)
    if differ:
        raise SystemExit(f"{path} was saved with other hyper-parameters: {', '.join(differ)}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    # A checkpoint of an older trainer holds no seconds: its training is not counted.
    seconds = float(state.get("trained_seconds", 0.0))
    return Progress(state["step"], list(state["epoch_losses"]), state["loss_sum"], seconds)

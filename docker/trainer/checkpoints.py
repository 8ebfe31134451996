"""The example trainer's checkpoints on disk (docs/trainer.md, "Checkpoints").

``AVW_CHECKPOINT_DIR``, ``AVW_CHECKPOINT_EVERY``, ``AVW_CHECKPOINT_KEEP`` and
``AVW_RESUME_FROM`` are the checkpoint contract (:func:`checkpoint_plan`): rank 0 saves
``step-<N>.pt`` atomically every N steps and when told to stop (SIGTERM), keeping the newest
few. Which checkpoint every rank resumes from is ``resume.py``'s.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from wandb_run import LOCAL_WANDB_MODES

# The checkpoint contract (docs/trainer.md, "Checkpoints"); the provider's renderer sets the
# first and the third (airflow_volcano_wandb/template/checkpoints.py).
CHECKPOINT_DIR_ENV = "AVW_CHECKPOINT_DIR"
CHECKPOINT_EVERY_ENV = "AVW_CHECKPOINT_EVERY"
CHECKPOINT_KEEP_ENV = "AVW_CHECKPOINT_KEEP"
#: Complete checkpoints kept by default: the newest, and two to fall back on should it be lost.
DEFAULT_CHECKPOINT_KEEP = 3
RESUME_FROM_ENV = "AVW_RESUME_FROM"
#: ``AVW_RESUME_FROM=latest``: the newest complete checkpoint in ``AVW_CHECKPOINT_DIR``, if any.
RESUME_LATEST = "latest"
#: ``torchrun``'s count of its restarts of the training processes (0: the first start).
RESTART_COUNT_ENV = "TORCHELASTIC_RESTART_COUNT"
#: A complete checkpoint's name; a save in progress has another (``.step-....tmp``).
CHECKPOINT_NAME = re.compile(r"step-([0-9]+)\.pt\Z")
#: A W&B artifact (of the run's entity and project) that keeps every checkpoint rank 0 saves,
#: for pods without a shared volume: the operator's ``checkpoint-<run id>``
#: (``checkpoint_artifact.py``).
CHECKPOINT_ARTIFACT_ENV = "AVW_CHECKPOINT_ARTIFACT"


@dataclass(frozen=True)
class CheckpointPlan:
    """Where checkpoints go, how often, and where training resumes from (all from env)."""

    directory: Path | None
    """``None``: no checkpoints are saved."""
    every: int | None
    """Save every this many steps (and at the last); ``None``: at the end of every epoch."""
    resume_from: str | None
    """A checkpoint's path, :data:`RESUME_LATEST`, or ``None`` to start from step 0."""
    keep: int = DEFAULT_CHECKPOINT_KEEP
    """How many complete checkpoints a save leaves (the newest ones): a volume of a long
    training would otherwise fill with one checkpoint per epoch."""
    artifact: str | None = None
    """The W&B artifact every save is logged to, and ``latest`` also looks in."""


@dataclass
class Progress:
    """What a checkpoint holds besides the model and optimizer: how far training got."""

    step: int = 0
    """Optimizer steps done; the next step logged is ``step + 1``."""
    epoch_losses: list[float] = field(default_factory=list)
    loss_sum: float = 0.0
    """Sum of the losses of the epoch in progress (its mean is logged at the epoch's end)."""
    trained_seconds: float = 0.0
    """Wall-clock seconds spent training up to ``step``, over every try that trained the run
    (a resumed trainer adds its own to what it loaded): what a resume saves doing again."""


def checkpoint_plan(environ: Mapping[str, str], rank: int = 0) -> CheckpointPlan:
    """Read the checkpoint contract's env; a value that cannot work exits naming it. Rank 0
    logs the checkpoints to an artifact, so it needs an online run (the others need none)."""
    directory = environ.get(CHECKPOINT_DIR_ENV) or None
    raw_every = (environ.get(CHECKPOINT_EVERY_ENV) or "").strip()
    if raw_every and not (raw_every.isdigit() and int(raw_every) > 0):
        raise SystemExit(f"{CHECKPOINT_EVERY_ENV}={raw_every!r} is not a positive number of steps")
    raw_keep = (environ.get(CHECKPOINT_KEEP_ENV) or "").strip()
    if raw_keep and not (raw_keep.isdigit() and int(raw_keep) > 0):
        raise SystemExit(f"{CHECKPOINT_KEEP_ENV}={raw_keep!r} is not a positive number")
    resume_from = (environ.get(RESUME_FROM_ENV) or "").strip() or None
    if resume_from is None and directory and (environ.get(RESTART_COUNT_ENV) or "0") != "0":
        # torchrun restarted this process (a re-formation of an elastic job, or a failure):
        # what the world before it trained is in the newest checkpoint, not at step 0.
        resume_from = RESUME_LATEST
    if resume_from == RESUME_LATEST and directory is None:
        raise SystemExit(f"{RESUME_FROM_ENV}={RESUME_LATEST} needs {CHECKPOINT_DIR_ENV}")
    artifact = (environ.get(CHECKPOINT_ARTIFACT_ENV) or "").strip() or None
    if artifact and directory is None:
        raise SystemExit(
            f"{CHECKPOINT_ARTIFACT_ENV}={artifact} needs {CHECKPOINT_DIR_ENV}: a checkpoint is "
            "saved there before it is logged to W&B"
        )
    mode = (environ.get("WANDB_MODE") or "").strip().lower()
    if artifact and rank == 0 and mode in LOCAL_WANDB_MODES:
        raise SystemExit(
            f"{CHECKPOINT_ARTIFACT_ENV}={artifact} needs an online W&B run on rank 0, and "
            f"WANDB_MODE={mode} sends nothing to W&B: no checkpoint would be kept there"
        )
    return CheckpointPlan(
        directory=Path(directory) if directory else None,
        every=int(raw_every) if raw_every else None,
        resume_from=resume_from,
        keep=int(raw_keep) if raw_keep else DEFAULT_CHECKPOINT_KEEP,
        artifact=artifact,
    )


def checkpoint_path(directory: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` is (zero-padded, so names sort as steps do)."""
    return directory / f"step-{step:09d}.pt"


def complete_checkpoints(directory: Path) -> list[Path]:
    """The complete checkpoints in ``directory``, oldest step first (none without the
    directory). Saves in progress never match :data:`CHECKPOINT_NAME`."""
    if not directory.is_dir():
        return []
    found = [
        (int(match[1]), path)
        for path in directory.iterdir()
        if (match := CHECKPOINT_NAME.match(path.name)) and path.is_file()
    ]
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: Path) -> Path | None:
    """The complete checkpoint of the highest step in ``directory`` (``None``: none yet)."""
    found = complete_checkpoints(directory)
    return found[-1] if found else None


def prune_checkpoints(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints; returns what was deleted.

    Only after a save has completed, so the newest is never the one at risk; saves in
    progress (another rank's temporary files) are not checkpoints and are left alone.
    """
    old = complete_checkpoints(directory)[:-keep]
    for path in old:
        path.unlink(missing_ok=True)
    return old


#: A packed checkpoint's entry holding everything but its tensors, as JSON bytes.
_SKELETON = "skeleton.json"
#: How the skeleton refers to a tensor (by its entry) and writes a mapping (key types kept:
#: an optimizer's state is keyed by parameter number, which JSON would turn into text).
_TENSOR, _MAPPING = "__tensor__", "__mapping__"


def pack_checkpoint(state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """``state`` as tensors only, so that ``torch.load(weights_only=True)`` reads it on every
    torch the trainer runs on: torch 1.13's safe unpickler (the local real-pod image's) refuses
    a pickled Python float. The tensors are entries of their own; the rest is JSON in a byte
    tensor. Anything JSON cannot hold raises (``TypeError``)."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            entry = str(len(tensors))
            tensors[entry] = value
            return {_TENSOR: entry}
        if isinstance(value, Mapping):
            return {_MAPPING: [[walk(k), walk(v)] for k, v in value.items()]}
        if isinstance(value, list | tuple):
            return [walk(item) for item in value]
        return value

    skeleton = json.dumps(walk(dict(state))).encode()
    return {**tensors, _SKELETON: torch.tensor(list(skeleton), dtype=torch.uint8)}


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint :func:`save_checkpoint` wrote, loaded without running any pickled code."""
    packed = torch.load(path, map_location="cpu", weights_only=True)

    def build(value: Any) -> Any:
        if isinstance(value, dict) and _TENSOR in value:
            return packed[value[_TENSOR]]
        if isinstance(value, dict):
            return {build(k): build(v) for k, v in value[_MAPPING]}
        if isinstance(value, list):
            return [build(item) for item in value]
        return value

    return build(json.loads(bytes(packed[_SKELETON].tolist())))


def save_checkpoint(directory: Path, step: int, state: Mapping[str, Any]) -> Path:
    """Write ``state`` as the checkpoint of ``step``, atomically: into a temporary file in the
    same directory, flushed to disk, then renamed (a checkpoint is complete or absent)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory, step)
    temporary = temporary_path(final)
    packed = pack_checkpoint(state)  # before the file: a state that cannot be saved leaves none
    try:
        with temporary.open("wb") as out:
            torch.save(packed, out)
        move_into_place(temporary, final)
    finally:
        temporary.unlink(missing_ok=True)
    return final


def temporary_path(final: Path) -> Path:
    """A name beside ``final`` that is no checkpoint's, for this process's write of it."""
    return final.with_name(f".{final.name}.{os.getpid()}.tmp")


def move_into_place(temporary: Path, final: Path) -> None:
    """Flush ``temporary`` to disk and rename it onto ``final`` (same directory): complete or
    absent, whenever the process dies."""
    _fsync(temporary)
    os.replace(temporary, final)
    _fsync(final.parent)  # the rename reaches the disk only with the directory's entry


def _fsync(path: Path) -> None:
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)

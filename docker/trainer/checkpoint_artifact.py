"""The example trainer's checkpoints in a W&B artifact (docs/trainer.md, "In a W&B artifact").

For pods without a shared volume: rank 0 logs each checkpoint it saves as a new version of the
artifact ``AVW_CHECKPOINT_ARTIFACT`` names (the operator's ``checkpoint-<run id>``, in the
run's entity and project), and ``AVW_RESUME_FROM=latest`` looks there too. Only W&B's side is
here; where a file goes, atomically, and which ranks get it is ``checkpoints.py``'s and
``resume.py``'s. ``resume.py`` and ``training.py`` import this module (beside them in the
image) only on rank 0 of a run with the artifact set.

The W&B API key is the SDK's business: nothing here reads or prints it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import wandb

#: Seconds a save waits for W&B to commit its version. A version is complete or absent, so a
#: save is done only once committed; a stop's save must also fit the pod's grace period.
COMMIT_TIMEOUT_S = 300


def version_name(artifact: Any) -> str:
    """``entity/project/name:vK``: the version itself, whatever alias found it."""
    collection = artifact.name.partition(":")[0]
    return f"{artifact.entity}/{artifact.project}/{collection}:{artifact.version}"


def log_checkpoint(run: Any, name: str, path: Path, step: int, trained_seconds: float) -> str:
    """Log the checkpoint file at ``path`` (under its own name) as a new version of the
    artifact ``name`` and wait until W&B has committed it; return the version's name. The
    metadata is what a resume compares with its local checkpoint, without a download."""
    metadata = {"step": step, "trained_seconds": trained_seconds}
    artifact = wandb.Artifact(name, type="model", metadata=metadata)
    artifact.add_file(str(path), name=path.name)
    aliases = ["latest", f"step-{step}"]
    try:
        run.log_artifact(artifact, aliases=aliases).wait(timeout=COMMIT_TIMEOUT_S)
    except Exception as error:  # the SDK's errors have no common base; any one fails the save
        raise SystemExit(f"cannot log {path} to the W&B artifact {name}: {error}") from error
    return version_name(artifact)


def newest_version(run: Any, name: str) -> Any:
    """The artifact's ``latest`` version, or ``None`` when it has none yet (the run's first
    start). Any other failure exits naming the artifact: starting from step 0 while a
    checkpoint may exist would throw the run's training away."""
    path = f"{run.entity}/{run.project}/{name}:latest"
    try:
        return wandb.Api().artifact(path)
    except Exception as error:
        # The SDK puts a ValueError in its CommError when the server answered that there is
        # no such artifact; a failed request or a server's error carries another cause.
        if isinstance(error, wandb.errors.CommError) and isinstance(error.exc, ValueError):
            return None
        raise SystemExit(f"cannot read the W&B artifact {path}: {error}") from error


def download(version: Any, staging: Path) -> Path:
    """Download the version's checkpoint into the directory ``staging``; return the file. The
    SDK's file cache is skipped: it would keep a second copy of a large file in the pod."""
    (entry,) = version.manifest.entries  # log_checkpoint's one file
    version.download(root=str(staging), skip_cache=True)
    return staging / entry

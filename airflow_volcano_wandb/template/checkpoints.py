"""Where a run's trainer keeps its checkpoints, and the time a stop gives it to save one.

The checkpoint contract (docs/trainer.md, "Checkpoints"): every rank's main container gets
``AVW_CHECKPOINT_DIR`` (its run's directory on a shared volume, or a pod's own ``emptyDir``
when the run's W&B artifact ``AVW_CHECKPOINT_ARTIFACT`` keeps them) and ``AVW_RESUME_FROM``
(``latest`` unless the template or ``env`` names one: the operator cannot read the volume).
Volcano stops a job by deleting its pods, so the pods' ``terminationGracePeriodSeconds`` is
the trainer's time to save. ``render_job``'s ``checkpoint_volume``, ``checkpoint_artifact``
and ``checkpoint_grace``, declared and checked once. Pure; see docs/checkpoints.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.template import naming
from airflow_volcano_wandb.template.errors import error_at
from airflow_volcano_wandb.template.options import keep_checked, option
from airflow_volcano_wandb.template.structure import main_container, mounts_at, pod_spec
from airflow_volcano_wandb.template.values import flag, show

VOLUME = "avw-checkpoints"
MOUNT_PATH = "/checkpoints"
CHECKPOINT_DIR_ENV = "AVW_CHECKPOINT_DIR"
RESUME_FROM_ENV = "AVW_RESUME_FROM"
CHECKPOINT_ARTIFACT_ENV = "AVW_CHECKPOINT_ARTIFACT"
#: The run's checkpoint artifact is this prefix and its run id (as W&B's Lightning logger names
#: its ``model-<run id>``): a new run never finds another run's checkpoints.
ARTIFACT_PREFIX = "checkpoint-"
#: What W&B accepts in an artifact's name, and its longest.
_ARTIFACT_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
#: ``AVW_RESUME_FROM``'s word for the newest complete checkpoint in ``AVW_CHECKPOINT_DIR``.
RESUME_LATEST = "latest"


def _grace(value: Any) -> int | None:
    if value is not None and (type(value) is not int or value < 1):
        raise error_at(
            ("checkpoint_grace",), f"must be a positive number of seconds, not {show(value)}"
        )
    return value


def _claim(value: Any) -> str | None:
    if value is not None and not naming.is_dns1123_subdomain(value):
        raise error_at(
            ("checkpoint_volume",),
            "must name a PersistentVolumeClaim (a DNS-1123 subdomain such as "
            f"'training-checkpoints'), not {show(value)}",
        )
    claim: str | None = value  # None, or the valid name just checked
    return claim


@dataclass(frozen=True, kw_only=True)
class Checkpoints:
    """Where checkpoints are kept and the pods' grace period, checked as it is built."""

    checkpoint_volume: str | None = option(
        None,
        """the name of a PersistentVolumeClaim for the trainer's checkpoints
        (docs/trainer.md, "Checkpoints"): every task's pod template gets a volume of it,
        mounted at ``/checkpoints`` in the main container, which gets
        ``AVW_CHECKPOINT_DIR=/checkpoints/<the run_id macro>`` (one directory per run) and
        ``AVW_RESUME_FROM=latest`` (unless it sets ``AVW_RESUME_FROM`` itself), so a restarted
        pod continues from the newest complete checkpoint of its run. Every rank must see the
        same files: a ``ReadWriteMany`` claim for a job over several nodes. ``None``: none.""",
        check=_claim,
        templated=True,
    )
    checkpoint_artifact: bool = option(
        False,
        """True to keep the checkpoints in the run's W&B artifact, ``checkpoint-<the run_id
        macro>`` (``AVW_CHECKPOINT_ARTIFACT``), for a cluster without a shared volume; without
        ``checkpoint_volume`` the ``/checkpoints`` volume is then each pod's own ``emptyDir``.
        Needs an online W&B run.""",
        check=flag("checkpoint_artifact"),
    )
    checkpoint_grace: int | None = option(
        None,
        """seconds a deleted pod has to save a checkpoint before it is killed:
        ``terminationGracePeriodSeconds`` of every pod template. ``None``: the template's (the
        kubelet's default is 30).""",
        check=_grace,
    )
    #: The ``run_id`` macro (the W&B run id), which names the run's directory and its
    #: artifact: two runs never share checkpoints.
    run_id: Any = None
    #: The run's own directory on the volume, as the containers see it; ``None``: no
    #: checkpoints, no volume, no env.
    directory: str | None = field(init=False, default=None)
    #: The run's W&B artifact the trainer saves every checkpoint to; ``None``: none.
    artifact: str | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        keep_checked(self)
        if self.checkpoint_volume is None and not self.checkpoint_artifact:
            return
        which = "checkpoint_volume" if self.checkpoint_volume is not None else "checkpoint_artifact"
        if not _is_directory_name(self.run_id):
            raise error_at(
                (which,),
                "needs the run_id macro to name the run's own checkpoints, got "
                f"{show(self.run_id)}",
            )
        name = f"{ARTIFACT_PREFIX}{self.run_id}" if self.checkpoint_artifact else None
        if name is not None and not _ARTIFACT_NAME.fullmatch(name):
            raise error_at(
                ("checkpoint_artifact",),
                f"names the run's artifact {show(name)}, which W&B refuses: a run id of "
                "letters, digits, '-', '_' and '.' is needed",
            )
        object.__setattr__(self, "directory", f"{MOUNT_PATH}/{self.run_id}")
        object.__setattr__(self, "artifact", name)

    def apply(self, tasks: list[dict[str, Any]]) -> None:
        """Set every pod template's grace period; with a claim, mount it in every task's main
        container and give that container the contract's env."""
        for i, task in enumerate(tasks):
            spec = pod_spec(task)
            if spec is None:
                continue  # validation reports it
            if self.checkpoint_grace is not None:
                spec["terminationGracePeriodSeconds"] = self.checkpoint_grace
            if self.directory is not None:
                self._mount(task, spec, ("spec", "tasks", i))

    def _mount(self, task: dict[str, Any], spec: dict[str, Any], path: tuple[Any, ...]) -> None:
        volumes = spec.setdefault("volumes", [])
        if not isinstance(volumes, list):
            return  # validation reports it
        if any(isinstance(v, dict) and v.get("name") == VOLUME for v in volumes):
            raise error_at(
                (*path, "template", "spec", "volumes"),
                f"a volume is already named {VOLUME!r}, the name the provider gives the "
                "checkpoint volume: rename it, or pass no checkpoint_volume",
            )
        cpath, container = main_container(task, path)
        mounts = container.setdefault("volumeMounts", [])
        env = container.setdefault("env", [])
        if not isinstance(mounts, list) or not isinstance(env, list):
            return  # validation reports it
        if mounts_at(container, MOUNT_PATH):
            raise error_at(
                (*cpath, "volumeMounts"),
                f"something is mounted at {MOUNT_PATH} already, where the provider mounts "
                "the checkpoint volume: move it, or pass no checkpoint_volume",
            )
        # Without a claim, the pod's own scratch: a checkpoint waits there for its upload.
        source = (
            {"persistentVolumeClaim": {"claimName": self.checkpoint_volume}}
            if self.checkpoint_volume is not None
            else {"emptyDir": {}}
        )
        volumes.append({"name": VOLUME, **source})
        mounts.append({"name": VOLUME, "mountPath": MOUNT_PATH})
        # The run's directory and artifact are the provider's (one per run); where to resume
        # from is the template's or env='s to say, else the newest checkpoint.
        named = {e.get("name"): e for e in env if isinstance(e, dict)}
        owned = {CHECKPOINT_DIR_ENV: self.directory, CHECKPOINT_ARTIFACT_ENV: self.artifact}
        for key, value in owned.items():
            if value is None:
                continue
            if key in named:
                named[key].clear()
                named[key].update({"name": key, "value": value})
            else:
                env.append({"name": key, "value": value})
        if RESUME_FROM_ENV not in named:
            env.append({"name": RESUME_FROM_ENV, "value": RESUME_LATEST})


def _is_directory_name(value: Any) -> bool:
    """One path component: nothing that would put the run's directory elsewhere."""
    if not isinstance(value, str) or not value.strip():
        return False
    return "/" not in value and value not in (".", "..")

"""Where a run's trainer keeps its checkpoints, and the time a stop gives it to save one.

The checkpoint contract (docs/trainer.md, "Checkpoints"): every rank's main container gets
``AVW_CHECKPOINT_DIR``, a directory of its own run on a shared volume, and ``AVW_RESUME_FROM``
(``latest`` unless the template or ``env`` names a checkpoint), so a restarted pod, or a later
try of the same W&B run, continues from the newest complete checkpoint there. The operator
cannot read the volume to name one, hence the word. Volcano stops a job by deleting its pods
(SIGTERM, then SIGKILL once the pod's ``terminationGracePeriodSeconds`` pass): the grace is
the trainer's time to finish its step and save.

Without a shared volume, the run's W&B artifact keeps them: ``AVW_CHECKPOINT_ARTIFACT``
(``checkpoint-<run id>``, one artifact per run as one directory per run) gets a version per
save, and ``AVW_CHECKPOINT_DIR`` is then a pod's own ``emptyDir`` where the trainer writes a
checkpoint before it uploads it, and downloads the artifact's newest to resume.

:func:`~airflow_volcano_wandb.template.render_job`'s ``checkpoint_volume``,
``checkpoint_artifact`` and ``checkpoint_grace``, checked once. Pure; see docs/templates.md
("Checkpoints").
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template import naming
from airflow_volcano_wandb.template.errors import error_at
from airflow_volcano_wandb.template.structure import main_container, pod_spec
from airflow_volcano_wandb.template.values import show

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


@dataclass(frozen=True)
class Checkpoints:
    """Where checkpoints are kept and the pods' grace period; built by :meth:`checked`."""

    claim: str | None
    """A PersistentVolumeClaim's name; ``None``: no shared volume."""
    grace: int | None
    """``terminationGracePeriodSeconds`` of every pod; ``None`` keeps the template's."""
    directory: str | None
    """The run's own directory on the volume, as the containers see it; ``None``: no
    checkpoints, no volume, no env."""
    artifact: str | None = None
    """The run's W&B artifact the trainer saves every checkpoint to; ``None``: none."""

    @classmethod
    def checked(cls, *, volume: Any, grace: Any, run_id: Any, artifact: Any = False) -> Checkpoints:
        """Check the arguments; :class:`TemplateError` names the first bad one.

        :param run_id: the ``run_id`` macro (the W&B run id), which names the run's directory
            and its artifact: two runs never share checkpoints.
        :param artifact: True to keep checkpoints in the run's W&B artifact too (without a
            ``volume``, only there).
        """
        if grace is not None and (type(grace) is not int or grace < 1):
            raise error_at(
                ("checkpoint_grace",), f"must be a positive number of seconds, not {show(grace)}"
            )
        if type(artifact) is not bool:
            raise error_at(("checkpoint_artifact",), f"must be True or False, not {show(artifact)}")
        if volume is None and not artifact:
            return cls(None, grace, None)
        if volume is not None and not naming.is_dns1123_subdomain(volume):
            raise error_at(
                ("checkpoint_volume",),
                "must name a PersistentVolumeClaim (a DNS-1123 subdomain such as "
                f"'training-checkpoints'), not {show(volume)}",
            )
        field = "checkpoint_volume" if volume is not None else "checkpoint_artifact"
        if not _is_directory_name(run_id):
            raise error_at(
                (field,),
                f"needs the run_id macro to name the run's own checkpoints, got {show(run_id)}",
            )
        name = f"{ARTIFACT_PREFIX}{run_id}" if artifact else None
        if name is not None and not _ARTIFACT_NAME.fullmatch(name):
            raise error_at(
                ("checkpoint_artifact",),
                f"names the run's artifact {show(name)}, which W&B refuses: a run id of "
                "letters, digits, '-', '_' and '.' is needed",
            )
        return cls(volume, grace, f"{MOUNT_PATH}/{run_id}", name)

    def apply(self, tasks: list[dict[str, Any]]) -> None:
        """Set every pod template's grace period; with a claim, mount it in every task's main
        container and give that container the contract's env."""
        for i, task in enumerate(tasks):
            spec = pod_spec(task)
            if spec is None:
                continue  # validation reports it
            if self.grace is not None:
                spec["terminationGracePeriodSeconds"] = self.grace
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
        if any(
            isinstance(m, dict) and str(m.get("mountPath") or "").rstrip("/") == MOUNT_PATH
            for m in mounts
        ):
            raise error_at(
                (*cpath, "volumeMounts"),
                f"something is mounted at {MOUNT_PATH} already, where the provider mounts "
                "the checkpoint volume: move it, or pass no checkpoint_volume",
            )
        # Without a claim, the pod's own scratch: a checkpoint waits there for its upload.
        source = (
            {"persistentVolumeClaim": {"claimName": self.claim}}
            if self.claim is not None
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

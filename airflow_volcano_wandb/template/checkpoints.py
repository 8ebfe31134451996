"""Where a run's trainer keeps its checkpoints, and the time a stop gives it to save one.

The checkpoint contract (docs/trainer.md, "Checkpoints"): every rank's main container gets
``AVW_CHECKPOINT_DIR``, a directory of its own run on a shared volume, and ``AVW_RESUME_FROM``
(``latest`` unless the template or ``env`` names a checkpoint), so a restarted pod, or a later
try of the same W&B run, continues from the newest complete checkpoint there. The operator
cannot read the volume to name one, hence the word. Volcano stops a job by deleting its pods
(SIGTERM, then SIGKILL once the pod's ``terminationGracePeriodSeconds`` pass): the grace is
the trainer's time to finish its step and save.

:func:`~airflow_volcano_wandb.template.render_job`'s ``checkpoint_volume`` and
``checkpoint_grace``, checked once. Pure; see docs/templates.md ("Checkpoints").
"""

from __future__ import annotations

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
#: ``AVW_RESUME_FROM``'s word for the newest complete checkpoint in ``AVW_CHECKPOINT_DIR``.
RESUME_LATEST = "latest"


@dataclass(frozen=True)
class Checkpoints:
    """The claim mounted for checkpoints and the pods' grace period; built by :meth:`checked`."""

    claim: str | None
    """A PersistentVolumeClaim's name; ``None``: no volume, no env."""
    grace: int | None
    """``terminationGracePeriodSeconds`` of every pod; ``None`` keeps the template's."""
    directory: str | None
    """The run's own directory on the volume, as the containers see it."""

    @classmethod
    def checked(cls, *, volume: Any, grace: Any, run_id: Any) -> Checkpoints:
        """Check the arguments; :class:`TemplateError` names the first bad one.

        :param run_id: the ``run_id`` macro (the W&B run id), which names the run's directory:
            two runs never share checkpoints.
        """
        if grace is not None and (type(grace) is not int or grace < 1):
            raise error_at(
                ("checkpoint_grace",), f"must be a positive number of seconds, not {show(grace)}"
            )
        if volume is None:
            return cls(None, grace, None)
        if not naming.is_dns1123_subdomain(volume):
            raise error_at(
                ("checkpoint_volume",),
                "must name a PersistentVolumeClaim (a DNS-1123 subdomain such as "
                f"'training-checkpoints'), not {show(volume)}",
            )
        if not _is_directory_name(run_id):
            raise error_at(
                ("checkpoint_volume",),
                "needs the run_id macro to name the run's own directory on the volume, "
                f"got {show(run_id)}",
            )
        return cls(volume, grace, f"{MOUNT_PATH}/{run_id}")

    def apply(self, tasks: list[dict[str, Any]]) -> None:
        """Set every pod template's grace period; with a claim, mount it in every task's main
        container and give that container the contract's env."""
        for i, task in enumerate(tasks):
            spec = pod_spec(task)
            if spec is None:
                continue  # validation reports it
            if self.grace is not None:
                spec["terminationGracePeriodSeconds"] = self.grace
            if self.claim is not None:
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
        volumes.append({"name": VOLUME, "persistentVolumeClaim": {"claimName": self.claim}})
        mounts.append({"name": VOLUME, "mountPath": MOUNT_PATH})
        # The run's directory is the provider's (one per run); where to resume from is the
        # template's or env='s to say, else the newest checkpoint there.
        named = {e.get("name"): e for e in env if isinstance(e, dict)}
        if CHECKPOINT_DIR_ENV in named:
            named[CHECKPOINT_DIR_ENV].clear()
            named[CHECKPOINT_DIR_ENV].update({"name": CHECKPOINT_DIR_ENV, "value": self.directory})
        else:
            env.append({"name": CHECKPOINT_DIR_ENV, "value": self.directory})
        if RESUME_FROM_ENV not in named:
            env.append({"name": RESUME_FROM_ENV, "value": RESUME_LATEST})


def _is_directory_name(value: Any) -> bool:
    """One path component: nothing that would put the run's directory elsewhere."""
    if not isinstance(value, str) or not value.strip():
        return False
    return "/" not in value and value not in (".", "..")

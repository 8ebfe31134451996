"""How the rendered job is shaped for Volcano's gang and PyTorch's ranks, after the run's
overrides: gang sizes, the master's policy, the scheduler, a name that leaves room for pod
names, the ``torchrun`` env and ``/dev/shm``, for the Volcano release the job is for.

:func:`~airflow_volcano_wandb.template.render_job`'s ``gang``, ``add_master_policy``,
``max_replicas``, ``torchrun_env``, ``shm_size`` and ``volcano_version``, checked once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template import gang as gang_sizes
from airflow_volcano_wandb.template import naming, torchrun, volcano
from airflow_volcano_wandb.template import plugins as releases
from airflow_volcano_wandb.template.errors import TemplateError, error_at
from airflow_volcano_wandb.template.structure import task_index
from airflow_volcano_wandb.template.values import show

DEFAULT_SCHEDULER_NAME = "volcano"


@dataclass(frozen=True)
class Shaping:
    """The switches that shape the job; built only through :meth:`checked`."""

    gang: str
    add_master_policy: bool
    max_replicas: int
    torchrun_env: bool
    shm_size: str | None
    #: The Volcano release the job is for, parsed.
    target: tuple[int, ...]

    @classmethod
    def checked(
        cls,
        *,
        gang: Any,
        add_master_policy: Any,
        max_replicas: Any,
        torchrun_env: Any,
        shm_size: str | None,
        volcano_version: Any,
    ) -> Shaping:
        """The switches, each checked; :class:`TemplateError` naming the first bad one."""
        if gang not in gang_sizes.GANG_MODES:
            raise error_at(
                ("gang",), f"must be one of {', '.join(gang_sizes.GANG_MODES)}, not {show(gang)}"
            )
        if type(max_replicas) is not int or max_replicas < 1:
            raise TemplateError(
                f"max_replicas must be a positive integer, got {show(max_replicas)}"
            )
        if not isinstance(add_master_policy, bool):
            raise TemplateError("add_master_policy must be True or False")
        if not isinstance(torchrun_env, bool):
            raise TemplateError("torchrun_env must be True or False")
        try:
            target = releases.target_version(volcano_version)
        except releases.VersionError as exc:
            raise error_at(("volcano_version",), str(exc)) from None
        return cls(gang, add_master_policy, max_replicas, torchrun_env, shm_size, target)

    def apply(self, job: dict[str, Any], tasks: list[dict[str, Any]], replicas_before: Any) -> None:
        """Shape ``job`` whose tasks had ``replicas_before`` before the run's overrides."""
        gang_sizes.rescale(job, tasks, replicas_before)
        if self.gang == "all_ranks":
            gang_sizes.gang_all_ranks(job, tasks)
        if self.add_master_policy:
            _master_policy(job, tasks)
        if not job["spec"].get("schedulerName"):
            job["spec"]["schedulerName"] = DEFAULT_SCHEDULER_NAME
        _fit_job_name(job, tasks, self.max_replicas)
        if self.torchrun_env:
            rank_plugin = torchrun.RANK_PLUGIN in releases.plugins_in(self.target)
            torchrun.apply_torchrun_env(job, tasks, rank_plugin=rank_plugin)
        torchrun.apply_shm(job, tasks, self.shm_size)


def _master_policy(job: dict[str, Any], tasks: list[dict[str, Any]]) -> None:
    plugins = job["spec"].get("plugins")
    arguments = plugins.get("pytorch") if isinstance(plugins, dict) else None
    if not isinstance(arguments, list):
        return
    roles, _ = volcano.plugin_roles(arguments)
    index = task_index(tasks)
    if roles["master"] in index:
        i = index[roles["master"]]
        volcano.ensure_master_policy(tasks[i], ("spec", "tasks", i))


def _fit_job_name(job: dict[str, Any], tasks: list[dict[str, Any]], max_replicas: int) -> None:
    name = job["metadata"].get("name")
    if not isinstance(name, str) or not name:
        raise error_at(
            ("metadata", "name"),
            "the job needs a name (set metadata.name in the "
            "template, e.g. wandb-job-${run_id}, or pass name=...)",
        )
    task_names = [t["name"] for t in tasks]
    if not all(naming.is_dns1123_label(t) for t in task_names):
        return  # validation reports the task names; a budget computed from them means nothing
    try:
        job["metadata"]["name"] = naming.fit_job_name(name, task_names, max_replicas)
    except ValueError as exc:
        raise error_at(("metadata", "name"), str(exc)) from None

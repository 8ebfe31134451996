"""How the rendered job is shaped for Volcano's gang and PyTorch's ranks, after the run's
overrides: gang sizes, the master's policy, the scheduler, a name that leaves room for pod
names, the ``torchrun`` env and ``/dev/shm``, for the Volcano release the job is for; the
``render_job`` keywords of each, declared and checked once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.template import elastic as elastic_workers
from airflow_volcano_wandb.template import gang as gang_sizes
from airflow_volcano_wandb.template import naming, torchrun, volcano
from airflow_volcano_wandb.template import plugins as releases
from airflow_volcano_wandb.template.errors import TemplateError, error_at
from airflow_volcano_wandb.template.options import keep_checked, option
from airflow_volcano_wandb.template.structure import task_index
from airflow_volcano_wandb.template.values import flag, show
from airflow_volcano_wandb.versions import VOLCANO_VERSION

DEFAULT_SCHEDULER_NAME = "volcano"


def _gang(value: Any) -> str:
    if not isinstance(value, str) or value not in gang_sizes.GANG_MODES:
        raise error_at(
            ("gang",), f"must be one of {', '.join(gang_sizes.GANG_MODES)}, not {show(value)}"
        )
    return value


def _max_replicas(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise TemplateError(f"max_replicas must be a positive integer, got {show(value)}")
    return value


@dataclass(frozen=True, kw_only=True)
class Shaping:
    """The switches that shape the job, each checked as it is built."""

    add_master_policy: bool = option(
        True,
        """when the ``pytorch`` plugin is used, give its master task ``TaskCompleted ->
        CompleteJob`` if missing, so the job completes with the master.""",
        check=flag("add_master_policy"),
    )
    max_replicas: int = option(
        naming.DEFAULT_MAX_REPLICAS,
        "upper bound for any task's replicas; also sizes the pod-name budget.",
        check=_max_replicas,
    )
    gang: str = option(
        "all_ranks",
        """``all_ranks`` (default) raises ``spec.minAvailable`` of a ``pytorch``-plugin job to
        its world size (master and worker replicas), so no rank starts before all can;
        ``template`` keeps the template's value (for elastic trainers).""",
        check=_gang,
    )
    elastic: tuple[int, int] | bool | None = option(
        None,
        """``(min_workers, max_workers)``: elastic workers (docs/elastic.md). The gang is the
        master and ``min_workers``, the job asks for ``max_workers``, a lost worker's pod is
        replaced alone (``RestartPod``) while the rest train on, the master's loss restarts the
        job, and ``torchrun`` runs with ``--nnodes=1+MIN:1+MAX`` and a c10d rendezvous on the
        master whose id is the job's name. ``True``: the range the template's worker task
        gives (``minAvailable``, ``replicas``), which its variables may fill and bound. Needs
        the ``pytorch`` plugin with tasks ``master`` (one replica) and ``worker``.""",
        check=elastic_workers.checked,
        typed=True,
        renderer="json",
    )
    torchrun_env: bool = option(
        True,
        """give every container of the ``pytorch`` plugin's master and worker tasks the env
        ``torchrun`` reads (``PET_NNODES``, ``PET_NODE_RANK``, ``PET_NPROC_PER_NODE`` from the
        container's GPU limit, ``PET_MASTER_ADDR``, ``PET_MASTER_PORT``); entries the
        container has already are kept. Where ``volcano_version`` has Volcano's ``hcclrank``
        plugin, also enables it and sets ``PET_NODE_RANK`` from the pod annotation it
        writes.""",
        check=flag("torchrun_env"),
    )
    shm_size: str | None = option(
        torchrun.DEFAULT_SHM_SIZE,
        """``sizeLimit`` of a memory-backed ``emptyDir`` mounted at ``/dev/shm`` in those
        containers (unless one mounts something there already; the runtime's 64 MiB default
        breaks DataLoader workers and NCCL); ``None``: none.""",
    )
    volcano_version: str | None = option(
        None,
        """the Volcano release the job is for (``v1.14.1``, ``1.13``; the oldest is
        ``v1.7.0``, the first with the ``pytorch`` plugin): the renderer adds only plugins it
        has, and a template naming one it lacks is an error at ``spec.plugins.<name>``, as its
        admission webhook would refuse the job (before v1.12.3, no ``hcclrank``, so no
        ``PET_NODE_RANK``). ``None``: the release the provider is tested with; the operator's
        is ``[volcano_wandb] volcano_version`` (by default that release). See
        docs/templates.md.""",
    )
    #: The Volcano release the job is for, parsed.
    target: releases.Version = field(init=False, repr=False)

    def __post_init__(self) -> None:
        keep_checked(self)
        try:
            given = self.volcano_version
            target = releases.target_version(VOLCANO_VERSION if given is None else given)
        except releases.VersionError as exc:
            raise error_at(("volcano_version",), str(exc)) from None
        object.__setattr__(self, "target", target)
        if self.elastic:
            elastic_workers.requires_restart_pod(target)
            most = None if self.elastic is True else self.elastic[1]  # type: ignore[index]
            if most is not None and most > self.max_replicas:
                raise error_at(
                    ("elastic", "max_workers"),
                    f"is {most}, above max_replicas ({self.max_replicas})",
                )
            if not self.torchrun_env:
                raise error_at(
                    ("torchrun_env",),
                    "elastic needs it: torchrun's elastic launch is configured through it",
                )

    def size_elastic(self, job: dict[str, Any], tasks: list[dict[str, Any]]) -> Any:
        """The elastic range, with the gang sized for it (before the guardrails judge the
        worker task's ``replicas`` and ``minAvailable``); ``None`` when not elastic."""
        if not self.elastic:
            return None
        return elastic_workers.sizes(job, tasks, self.elastic)

    def apply(
        self,
        job: dict[str, Any],
        tasks: list[dict[str, Any]],
        replicas_before: Any,
        workers: tuple[int, int] | None = None,
    ) -> None:
        """Shape ``job`` whose tasks had ``replicas_before`` before the run's overrides;
        ``workers``: the elastic range :meth:`size_elastic` gave."""
        gang_sizes.rescale(job, tasks, replicas_before)
        if workers is not None:
            # Again: the rescale above follows a gang-of-all minAvailable to the new replicas.
            elastic_workers.sizes(job, tasks, workers)
            elastic_workers.apply_policies(job, tasks)
            elastic_workers.retry_budget(job)
            elastic_workers.annotate(job, workers)
        elif self.gang == "all_ranks":
            gang_sizes.gang_all_ranks(job, tasks)
        if self.add_master_policy:
            _master_policy(job, tasks)
        if not job["spec"].get("schedulerName"):
            job["spec"]["schedulerName"] = DEFAULT_SCHEDULER_NAME
        _fit_job_name(job, tasks, self.max_replicas)
        if self.torchrun_env:
            rank_plugin = torchrun.RANK_PLUGIN in releases.plugins_in(self.target)
            torchrun.apply_torchrun_env(job, tasks, rank_plugin=rank_plugin, elastic=workers)
        torchrun.apply_shm(job, tasks, self.shm_size)


def _master_policy(job: dict[str, Any], tasks: list[dict[str, Any]]) -> None:
    found = volcano.pytorch_roles(job)
    index = task_index(tasks)
    if found is not None and found[0]["master"] in index:
        i = index[found[0]["master"]]
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

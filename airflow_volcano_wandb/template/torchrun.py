"""What ``torchrun`` needs on every rank of a ``pytorch``-plugin job, and a real ``/dev/shm``.

Volcano's ``pytorch`` plugin gives each pod ``MASTER_ADDR``, ``MASTER_PORT``, ``WORLD_SIZE``
and ``RANK``; ``torchrun`` reads ``PET_*`` env instead. All but ``PET_NODE_RANK`` are the same
for every pod of a task, so they go into the pod template. The node rank cannot be derived
from ``RANK`` (a ``$(RANK)`` reference only sees variables defined before it, and the plugin
appends its env after the template's), so it is read through the downward API from the pod
annotation ``hccl/rankIndex``, which Volcano's ``hcclrank`` plugin (v1.12.3+, ``plugins.py``)
writes; this stage enables that plugin. Pure; see docs/templates.md ("torchrun and /dev/shm")
for what a target Volcano without it gets.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_volcano_wandb.template import elastic as elastic_workers
from airflow_volcano_wandb.template import volcano
from airflow_volcano_wandb.template.errors import error_at
from airflow_volcano_wandb.template.gpus import container_gpus
from airflow_volcano_wandb.template.structure import all_containers, mounts_at, pod_spec, task_index
from airflow_volcano_wandb.template.values import clone, show

RANK_PLUGIN = "hcclrank"
RANK_ANNOTATION = "hccl/rankIndex"
DEFAULT_PORT = 23456  # the pytorch plugin's default --port
SHM_VOLUME = "avw-dshm"
SHM_PATH = "/dev/shm"
#: ``/dev/shm`` for PyTorch pods, memory-backed: the container runtime's default of 64 MiB is
#: too small for DataLoader workers and NCCL's shared-memory transport.
DEFAULT_SHM_SIZE = "1Gi"
NPROC_ENV = "PET_NPROC_PER_NODE"
#: What ``torchrun --nproc-per-node`` accepts besides a positive count: it counts the devices.
NPROC_WORDS = ("auto", "cpu", "gpu", "xpu")


def is_nproc(value: str) -> bool:
    """Whether ``torchrun`` can start this many processes per pod (a template or ``env=`` may
    set ``PET_NPROC_PER_NODE`` itself; validation refuses anything else)."""
    return (value.isdigit() and int(value) > 0) or value in NPROC_WORDS


def processes_per_pod(container: Mapping[str, Any]) -> int:
    """The processes a pod of this (main) container starts, as its ``PET_NPROC_PER_NODE``
    says: a count as given; ``gpu`` or ``auto`` count the container's GPUs. Without the
    variable (or with a value only the node knows, ``cpu``, ``xpu``, ``valueFrom``) it is the
    ``pytorch`` plugin's one process per pod."""
    env = container.get("env")
    for entry in env if isinstance(env, list) else ():
        if isinstance(entry, dict) and entry.get("name") == NPROC_ENV:
            value = str(entry.get("value") or "")
            if value.isdigit() and int(value) > 0:
                return int(value)
            if value in ("gpu", "auto"):
                return container_gpus(container) or 1
    return 1


def apply_torchrun_env(
    job: dict[str, Any],
    tasks: list[dict[str, Any]],
    rank_plugin: bool,
    elastic: tuple[int, int] | None = None,
) -> None:
    """Give every container of the master and worker tasks the ``PET_*`` env (an entry the
    container already has, from the template or ``env``, is kept).

    :param rank_plugin: the target Volcano has ``hcclrank``: enable it and read
        ``PET_NODE_RANK`` from its annotation; else set no ``PET_NODE_RANK``.
    :param elastic: ``(min_workers, max_workers)``: the c10d rendezvous on the master
        (``elastic.rendezvous_env``) instead of a fixed world; the rendezvous ranks the pods,
        so no ``PET_NODE_RANK`` and no ``hcclrank``.
    """
    found = volcano.pytorch_roles(job)
    if found is None:
        return
    roles, arguments = found
    index = task_index(tasks)
    ranked = [tasks[index[role]] for role in (roles["master"], roles["worker"]) if role in index]
    if roles["master"] not in index:
        return  # validation reports the missing master task
    master_addr = _master_addr(job, tasks[index[roles["master"]]], roles["master"])
    port = _port(arguments)
    common: dict[str, Any] = {
        "PET_NNODES": str(sum(int(t.get("replicas") or 0) for t in ranked)),
        "PET_MASTER_ADDR": master_addr,
        "PET_MASTER_PORT": str(port),
    }
    if elastic is not None:
        rank_plugin = False
        common.update(elastic_workers.rendezvous_env(job, elastic, f"{master_addr}:{port}"))
    for task in ranked:
        for _, container in all_containers(pod_spec(task), (), ("containers",)):
            env = container.setdefault("env", [])
            if not isinstance(env, list):
                continue  # validation reports it
            have = {str(e.get("name")) for e in env if isinstance(e, dict)}
            wanted: dict[str, Any] = {**common, NPROC_ENV: str(container_gpus(container) or 1)}
            if elastic is not None:
                wanted["PET_RDZV_CONF"] = elastic_workers.host_conf(task is ranked[0])
            if rank_plugin:
                wanted["PET_NODE_RANK"] = {
                    "fieldRef": {"fieldPath": f"metadata.annotations['{RANK_ANNOTATION}']"}
                }
            for name, value in wanted.items():
                if name in have:
                    continue
                key = "valueFrom" if isinstance(value, dict) else "value"
                env.append({"name": name, key: clone(value)})  # no dict shared between pods
    plugins = job["spec"]["plugins"]
    if rank_plugin and RANK_PLUGIN not in plugins:
        plugins[RANK_PLUGIN] = [f"--master={roles['master']}", f"--worker={roles['worker']}"]


def apply_shm(job: dict[str, Any], tasks: list[dict[str, Any]], size: str | None) -> None:
    """Mount a memory-backed ``emptyDir`` of ``size`` at ``/dev/shm`` in every container of the
    ``pytorch`` plugin's tasks, unless the container mounts something there already.

    :param size: the volume's ``sizeLimit`` (a Kubernetes quantity, e.g. ``"2Gi"``); ``None``
        adds nothing.
    """
    if size is None:
        return
    if not isinstance(size, str) or not size.strip():
        raise error_at(("shm_size",), f"must be a quantity such as '1Gi' or None, not {show(size)}")
    found = volcano.pytorch_roles(job)
    if found is None:
        return
    roles = found[0]
    index = task_index(tasks)
    for role in (roles["master"], roles["worker"]):
        if role not in index:
            continue
        i = index[role]
        spec = pod_spec(tasks[i])
        containers = all_containers(spec, (), ("containers",))
        needing = [c for _, c in containers if not mounts_at(c, SHM_PATH)]
        if spec is None or not needing:
            continue
        volumes = spec.setdefault("volumes", [])
        if not isinstance(volumes, list):
            continue  # validation reports it
        if any(isinstance(v, dict) and v.get("name") == SHM_VOLUME for v in volumes):
            raise error_at(
                ("spec", "tasks", i, "template", "spec", "volumes"),
                f"a volume is already named {SHM_VOLUME!r}, the name the provider gives "
                "/dev/shm: rename it, or pass shm_size=None",
            )
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": size}})
        for container in needing:
            mounts = container.setdefault("volumeMounts", [])
            if isinstance(mounts, list):
                mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})


def _port(arguments: list[Any]) -> int:
    """The plugin's ``--port`` (as Go's flag package reads it), else its default."""
    for i, argument in enumerate(arguments):
        if not isinstance(argument, str):
            continue
        flag, has_value, value = argument.lstrip("-").partition("=")
        if flag == "port" and argument.startswith("-"):
            if not has_value and i + 1 < len(arguments):
                value = str(arguments[i + 1])
            if value.isdigit():
                return int(value)
    return DEFAULT_PORT


def _master_addr(job: dict[str, Any], master: dict[str, Any], master_name: str) -> str:
    """The master pod's DNS name as the plugin computes ``MASTER_ADDR``: its hostname (the
    template's, else ``<job>-<master>-0``) and subdomain (the template's, else the job's
    name, which Volcano's ``svc`` plugin makes a headless service of)."""
    name = job["metadata"]["name"]
    spec = pod_spec(master) or {}
    host = spec.get("hostname") or f"{name}-{master_name}-0"
    return f"{host}.{spec.get('subdomain') or name}"

"""Elastic workers: a job that starts on the workers that fit and re-forms when one is lost.

``elastic=(min_workers, max_workers)`` (or ``True``: the template's own worker
``minAvailable`` and ``replicas``, which a queue admin's template variables may fill and bound)
shapes a ``pytorch``-plugin job whose tasks are ``master`` (one replica) and ``worker``:

* Volcano's gang is the master and ``min_workers`` (``spec.minAvailable`` and the tasks'
  ``minAvailable``; the admission webhook would default the worker task's to all its
  replicas, which is the all-or-nothing gang again), and the job asks for ``max_workers``: the
  scheduler places the rest as they fit;
* a lost worker's pod is replaced alone: ``PodEvicted``/``PodFailed`` -> ``RestartPod`` on the
  worker task. Not ``RestartTask``, which deletes every pod of the task (volcano v1.14.1,
  ``killPods`` with a task target), nor ``RestartJob``;
* the master's loss restarts the job (``PodEvicted``/``PodFailed`` -> ``RestartJob`` on the
  master task): the master pod serves torchrun's c10d rendezvous store and runs rank 0 (the W&B
  run's writer, the checkpoints' saver), so without it the workers cannot re-form; the
  restarted job resumes from the checkpoint on the same W&B run, within the job's
  ``maxRetry`` (:data:`MAX_RESTARTS` unless the template sets it: each replaced worker pod
  counts as one);
* every rank runs ``torchrun`` with ``--nnodes=1+MIN:1+MAX`` (nodes are pods, the master one of
  them), ``--rdzv-backend=c10d``, ``--rdzv-endpoint`` the master pod's address and the
  plugin's port, ``--rdzv-id`` the job's name and ``--rdzv-conf=is_host=1`` on the master
  alone, given as the ``PET_*`` env torchrun reads.

Nodes are ranked by their address in each rendezvous round, so every pod's address is its
own DNS name (``PET_LOCAL_ADDR``): ``<job>-master-0`` sorts before ``<job>-worker-N``, and
rank 0 stays on the master pod, which alone holds the W&B run's identity. Pure; see
docs/elastic.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from airflow_volcano_wandb.template import plugins as releases
from airflow_volcano_wandb.template import volcano
from airflow_volcano_wandb.template.errors import TemplateError, error_at
from airflow_volcano_wandb.template.gpus import pod_gpus
from airflow_volcano_wandb.template.structure import task_index
from airflow_volcano_wandb.template.values import show

#: The job's annotation that records the elastic range, ``"MIN:MAX"`` workers.
ELASTIC_ANNOTATION = "airflow-volcano-wandb.io/elastic-workers"
#: The trainer's env: the same range (the example trainer keeps its global batch under it).
ELASTIC_ENV = "AVW_ELASTIC_WORKERS"
#: The task names elastic needs: the plugin's defaults, and the order the ranks follow.
ROLES = ("master", "worker")
#: The first Volcano whose webhook accepts ``RestartPod`` (volcano-sh/apis#143, v1.11.0).
RESTART_POD_SINCE: releases.Version = (1, 11, 0)
#: torchrun restarts its processes on every failure and every re-formation; a worker's loss is
#: one of each on every survivor, so the budget is the losses a job may take. The job's
#: ``maxRetry`` too, unless the template sets one: Volcano counts every ``RestartPod`` as a
#: retry of the job, and its default of 3 failed an elastic job at its third lost worker.
MAX_RESTARTS = 100
WORKER_POLICY = "RestartPod"
MASTER_POLICY = "RestartJob"
LOSS_EVENTS = ("PodEvicted", "PodFailed")


def checked(value: Any) -> tuple[int, int] | bool | None:
    """``elastic=``: ``None``/``False`` (off), ``True`` (from the template) or two integers
    ``(min_workers, max_workers)``, ``0 <= min_workers <= max_workers``, ``max_workers >= 1``."""
    if value is None or value is False or value is True:
        return value
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 2:
        raise error_at(
            ("elastic",),
            f"must be (min_workers, max_workers), True or None, not {show(value)}",
        )
    for name, number in zip(("min_workers", "max_workers"), value, strict=True):
        if type(number) is not int:
            raise error_at(("elastic", name), f"must be an integer, not {show(number)}")
    low, high = value
    if low < 0:
        raise error_at(("elastic", "min_workers"), f"must be 0 or more, not {low}")
    if high < 1:
        raise error_at(("elastic", "max_workers"), f"must be 1 or more, not {high}")
    if low > high:
        raise error_at(("elastic", "min_workers"), f"is {low}, above max_workers ({high})")
    return low, high


def requires_restart_pod(target: releases.Version) -> None:
    """Elastic's worker policy needs a Volcano that accepts ``RestartPod``."""
    if target < RESTART_POD_SINCE:
        raise error_at(
            ("elastic",),
            f"needs Volcano {releases.show_version(RESTART_POD_SINCE)} or later (its webhook "
            f"accepts RestartPod, which replaces a lost worker's pod alone); volcano_version is "
            f"{releases.show_version(target)}",
        )


def _roles(job: dict[str, Any], tasks: list[dict[str, Any]]) -> tuple[int, int]:
    """The master and worker tasks' indexes; the errors name what elastic needs."""
    found = volcano.pytorch_roles(job)
    if found is None:
        raise error_at(
            ("spec", "plugins", "pytorch"),
            "elastic needs the pytorch plugin: it gives every pod the master's address, where "
            "torchrun's rendezvous is served",
        )
    roles = found[0]
    index = task_index(tasks)
    names = (roles["master"], roles["worker"])
    if names != ROLES or not all(name in index for name in ROLES):
        raise error_at(
            ("elastic",),
            f"needs the pytorch plugin's tasks named master and worker (the master pod's name "
            f"must sort first, so rank 0 stays on it); this template's are "
            f"{names[0]!r} and {names[1]!r}, its tasks {sorted(index)}",
        )
    return index["master"], index["worker"]


def sizes(
    job: dict[str, Any], tasks: list[dict[str, Any]], setting: tuple[int, int] | bool
) -> tuple[int, int]:
    """Size the gang: worker ``replicas`` = max, the worker task's ``minAvailable`` = min,
    the master's 1, ``spec.minAvailable`` = 1 + min; return ``(min, max)``. ``True`` reads the
    range off the worker task as the template (and its variables) left it."""
    master, worker = _roles(job, tasks)
    if tasks[master].get("replicas") != 1:
        raise error_at(
            ("spec", "tasks", master, "replicas"),
            f"elastic needs exactly one master replica (it serves the rendezvous), not "
            f"{show(tasks[master].get('replicas'))}",
        )
    if setting is True:
        high = tasks[worker].get("replicas")
        low = tasks[worker].get("minAvailable", high)
        try:
            low, high = checked((low, high))  # type: ignore[misc]
        except TemplateError as exc:
            raise error_at(
                ("spec", "tasks", worker),
                "elastic=True reads min_workers from the worker task's minAvailable and "
                f"max_workers from its replicas: {exc}",
            ) from None
    else:
        low, high = setting  # type: ignore[misc]
    if (
        low == 0
        and pod_gpus(tasks[worker].get("template") or {})
        > pod_gpus(tasks[master].get("template") or {})
        == 0
    ):
        raise error_at(
            ("elastic", "min_workers"),
            "is 0, but the master asks for no GPU while the workers do: the job would train "
            "on the master alone with no GPU (give the master the workers' GPUs, or raise "
            "min_workers)",
        )
    tasks[worker]["replicas"] = high
    tasks[worker]["minAvailable"] = low
    tasks[master]["minAvailable"] = 1
    job["spec"]["minAvailable"] = 1 + low
    return low, high


def _events(policy: dict[str, Any]) -> list[Any]:
    events = list(policy.get("events") or []) if isinstance(policy.get("events"), list) else []
    return [*events, policy["event"]] if "event" in policy else events


def _policies(task: dict[str, Any], path: tuple[Any, ...], action: str, why: str) -> None:
    """Map each loss event to ``action`` on ``task`` unless a policy maps it already: to the
    same action, kept; to another, an error naming the policy and ``why``."""
    policies = task.setdefault("policies", [])
    if not isinstance(policies, list):
        raise error_at((*path, "policies"), "must be a list of policies")
    mapped: set[str] = set()
    for i, policy in enumerate(policies):
        if not isinstance(policy, dict):
            continue
        events = _events(policy)
        hit = [e for e in events if e in (*LOSS_EVENTS, "*")]
        if hit and policy.get("action") != action:
            raise error_at(
                (*path, "policies", i),
                f"maps {hit[0]} to {policy.get('action')!r}; elastic needs {action}: {why}",
            )
        mapped.update(hit)
    if "*" in mapped:
        return
    missing = [e for e in LOSS_EVENTS if e not in mapped]
    if missing:
        policies.append({"events": missing, "action": action})


def apply_policies(job: dict[str, Any], tasks: list[dict[str, Any]]) -> None:
    """The worker task replaces a lost pod alone; the master's loss restarts the job."""
    master, worker = _roles(job, tasks)
    _policies(
        tasks[worker],
        ("spec", "tasks", worker),
        WORKER_POLICY,
        "a lost worker's pod is replaced alone while the others train on",
    )
    _policies(
        tasks[master],
        ("spec", "tasks", master),
        MASTER_POLICY,
        "the master serves the rendezvous and rank 0, so the workers cannot go on without it",
    )


def rendezvous_env(job: dict[str, Any], workers: tuple[int, int], endpoint: str) -> dict[str, Any]:
    """The ``PET_*`` env that makes ``torchrun`` elastic, and the trainer's range (the
    ``$(AVW_POD_NAME)`` reference needs that variable listed first, as it is here)."""
    low, high = workers
    name = job["metadata"]["name"]
    return {
        "AVW_POD_NAME": {"fieldRef": {"fieldPath": "metadata.name"}},
        "PET_NNODES": f"{1 + low}:{1 + high}",
        "PET_RDZV_BACKEND": "c10d",
        "PET_RDZV_ENDPOINT": endpoint,
        "PET_RDZV_ID": name,
        "PET_LOCAL_ADDR": f"$(AVW_POD_NAME).{name}",
        "PET_MAX_RESTARTS": str(MAX_RESTARTS),
        ELASTIC_ENV: f"{low}:{high}",
    }


def host_conf(is_master: bool) -> str:
    """``PET_RDZV_CONF``: the master's agent serves the rendezvous store and no other does.
    Left to guess, torchrun hosts it where the endpoint's name resolves to the pod itself,
    which a master that starts before its DNS record is published would not find."""
    return f"is_host={1 if is_master else 0}"


def retry_budget(job: dict[str, Any]) -> None:
    """``spec.maxRetry`` = :data:`MAX_RESTARTS` when the template leaves it to Volcano."""
    job["spec"].setdefault("maxRetry", MAX_RESTARTS)


def annotate(job: dict[str, Any], workers: tuple[int, int]) -> None:
    """Record the range on the job, for whoever reads it (the wait, ``kubectl``)."""
    annotations = job["metadata"].setdefault("annotations", {})
    if isinstance(annotations, dict):
        annotations[ELASTIC_ANNOTATION] = f"{workers[0]}:{workers[1]}"

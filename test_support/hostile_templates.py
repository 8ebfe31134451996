"""Queue templates written by an attacker who can edit a W&B Launch queue.

Each case is the seed template with one escape: a Secret that is not the run's own (read in
env, ``envFrom``, a volume or ``imagePullSecrets``, in every container kind of every task),
a scheduler other than Volcano's (the job's or a pod's), or a Volcano queue or priority class
the deployment did not allow. ``field`` is the JSON path the refusal must name. Every case is
a valid job apart from its escape, so that the refusal is about the escape and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from airflow_volcano_wandb.template import RunEnv

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"

#: The run's own key, as the operator names it (``api_key_secret.fresh_ref``, pinned).
OWN_KEY_SECRET = "avw-wandb-key-00000000000000000000000000000000"
#: Another job's key Secret in the same namespace.
OTHER_TASK_KEY_SECRET = "avw-wandb-key-0123456789abcdef0123456789abcdef"
#: Another team's key.
OTHER_TEAM_SECRET = "team-b-wandb"
OWN_KEY_ENV = [
    {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": OWN_KEY_SECRET, "key": "api-key"}},
    }
]
MACROS = {
    "image_uri": "registry.example.com/team-a/train:1",
    "run_id": "k3x9p2qa",
    "run_name": "ddp-mlp-1",
    "entity_name": "team-a",
    "project_name": "retraining",
    "author": "airflow",
    "stolen_secret": OTHER_TEAM_SECRET,
}
#: A deployment as the operator renders for it: its namespace, the run's key in every
#: container, and lists of the queues and priority classes team A may use.
DEPLOYMENT: dict[str, Any] = {
    "macros": MACROS,
    "namespace": "team-a",
    "run_env": RunEnv(master=OWN_KEY_ENV, others=OWN_KEY_ENV),
    "allowed_queues": ["default", "team-a"],
    "allowed_priority_classes": ["team-a-batch"],
}

TASKS = ("master", "worker")
CONTAINER_KINDS = ("containers", "initContainers", "ephemeralContainers")


def seed() -> dict[str, Any]:
    return yaml.safe_load(SEED.read_text())


@dataclass(frozen=True)
class Hostile:
    name: str
    #: The JSON path of the field the refusal must name.
    field: str
    #: The allow-list argument, and the value on it, that would let it through.
    argument: str
    value: str
    change: Callable[[dict[str, Any]], None]

    def template(self) -> dict[str, Any]:
        template = seed()
        self.change(template)
        return template


def _pod(template: dict[str, Any], task: int) -> dict[str, Any]:
    return template["spec"]["tasks"][task]["template"]["spec"]


def _container(template: dict[str, Any], task: int, kind: str) -> dict[str, Any]:
    """The task's main container, or a new helper of ``kind``."""
    spec = _pod(template, task)
    if kind == "containers":
        return spec["containers"][0]
    helper = {"name": "helper", "image": "${image_uri}"}
    spec.setdefault(kind, []).append(helper)
    return helper


def _env_case(task: int, kind: str) -> Hostile:
    def change(template: dict[str, Any]) -> None:
        ref = {"secretKeyRef": {"name": OTHER_TEAM_SECRET, "key": "api-key"}}
        _container(template, task, kind)["env"] = [{"name": "STOLEN", "valueFrom": ref}]

    path = f"spec.tasks[{task}].template.spec.{kind}[0].env[0].valueFrom.secretKeyRef.name"
    return Hostile(
        f"env-secret-{TASKS[task]}-{kind}", path, "allowed_secrets", OTHER_TEAM_SECRET, change
    )


def _env_from_case(task: int, kind: str) -> Hostile:
    def change(template: dict[str, Any]) -> None:
        source = {"secretRef": {"name": OTHER_TASK_KEY_SECRET}}
        _container(template, task, kind)["envFrom"] = [source]

    path = f"spec.tasks[{task}].template.spec.{kind}[0].envFrom[0].secretRef.name"
    return Hostile(
        f"env-from-{TASKS[task]}-{kind}", path, "allowed_secrets", OTHER_TASK_KEY_SECRET, change
    )


#: Volume sources that name a Secret: (source, the path of the name within the volume).
VOLUMES: dict[str, tuple[dict[str, Any], str]] = {
    "secret": ({"secret": {"secretName": OTHER_TEAM_SECRET}}, "secret.secretName"),
    "projected": (
        {"projected": {"sources": [{"secret": {"name": OTHER_TEAM_SECRET}}]}},
        "projected.sources[0].secret.name",
    ),
    "csi": (
        {
            "csi": {
                "driver": "secrets-store.csi.k8s.io",
                "nodePublishSecretRef": {"name": OTHER_TEAM_SECRET},
            }
        },
        "csi.nodePublishSecretRef.name",
    ),
    "azure-file": (
        {"azureFile": {"secretName": OTHER_TEAM_SECRET, "shareName": "data"}},
        "azureFile.secretName",
    ),
}


def _volume_case(task: int, source: str) -> Hostile:
    volume, where = VOLUMES[source]

    def change(template: dict[str, Any]) -> None:
        _pod(template, task)["volumes"] = [{"name": "loot", **volume}]
        mount = {"name": "loot", "mountPath": "/loot", "readOnly": True}
        _pod(template, task)["containers"][0]["volumeMounts"] = [mount]

    path = f"spec.tasks[{task}].template.spec.volumes[0].{where}"
    return Hostile(
        f"volume-{source}-{TASKS[task]}", path, "allowed_secrets", OTHER_TEAM_SECRET, change
    )


def _pull_secret_case(task: int) -> Hostile:
    def change(template: dict[str, Any]) -> None:
        _pod(template, task)["imagePullSecrets"] = [{"name": OTHER_TEAM_SECRET}]

    path = f"spec.tasks[{task}].template.spec.imagePullSecrets[0].name"
    return Hostile(
        f"image-pull-secret-{TASKS[task]}", path, "allowed_secrets", OTHER_TEAM_SECRET, change
    )


def _macro_secret(template: dict[str, Any]) -> None:
    ref = {"secretKeyRef": {"name": "${stolen_secret}", "key": "api-key"}}
    _pod(template, 0)["containers"][0]["env"] = [{"name": "STOLEN", "valueFrom": ref}]


def _pod_field_case(task: int, field: str, value: str, argument: str) -> Hostile:
    def change(template: dict[str, Any]) -> None:
        _pod(template, task)[field] = value

    path = f"spec.tasks[{task}].template.spec.{field}"
    return Hostile(f"pod-{field}-{TASKS[task]}", path, argument, value, change)


def _job_field_case(field: str, value: str, argument: str) -> Hostile:
    def change(template: dict[str, Any]) -> None:
        template["spec"][field] = value

    return Hostile(f"job-{field}", f"spec.{field}", argument, value, change)


CASES: list[Hostile] = [
    *(_env_case(t, k) for t in range(len(TASKS)) for k in CONTAINER_KINDS),
    *(_env_from_case(t, k) for t in range(len(TASKS)) for k in CONTAINER_KINDS),
    *(_volume_case(t, s) for t in range(len(TASKS)) for s in VOLUMES),
    *(_pull_secret_case(t) for t in range(len(TASKS))),
    Hostile(
        "env-secret-from-a-macro",
        "spec.tasks[0].template.spec.containers[0].env[0].valueFrom.secretKeyRef.name",
        "allowed_secrets",
        OTHER_TEAM_SECRET,
        _macro_secret,
    ),
    _job_field_case("schedulerName", "default-scheduler", "allowed_schedulers"),
    *(
        _pod_field_case(t, "schedulerName", "default-scheduler", "allowed_schedulers")
        for t in range(len(TASKS))
    ),
    _job_field_case("queue", "team-b-gpu", "allowed_queues"),
    _job_field_case("priorityClassName", "system-cluster-critical", "allowed_priority_classes"),
    *(
        _pod_field_case(t, "priorityClassName", "team-b-urgent", "allowed_priority_classes")
        for t in range(len(TASKS))
    ),
]

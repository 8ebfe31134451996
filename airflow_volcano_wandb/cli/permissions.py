"""What the provider needs of the cluster: the Volcano APIs it calls, what its Kubernetes
identity must be allowed in its namespace, and what it may optionally read cluster-wide (pure).

The one list the RBAC manifests, ``doctor`` and the audit-log test are held to.
"""

from __future__ import annotations

from dataclasses import dataclass

#: (group/version, resource) of every Volcano API the provider calls.
REQUIRED_APIS: tuple[tuple[str, str], ...] = (
    ("batch.volcano.sh/v1alpha1", "jobs"),
    ("scheduling.volcano.sh/v1beta1", "podgroups"),
    ("scheduling.volcano.sh/v1beta1", "queues"),
)


@dataclass(frozen=True)
class Permission:
    """One (verb, resource) the provider needs in its namespace."""

    group: str
    resource: str
    verb: str
    subresource: str = ""

    def __str__(self) -> str:
        resource = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{self.verb} {resource}.{self.group}" if self.group else f"{self.verb} {resource}"


def _permissions(group: str, resource: str, verbs: str) -> tuple[Permission, ...]:
    resource, _, subresource = resource.partition("/")
    return tuple(Permission(group, resource, verb, subresource) for verb in verbs.split())


# The Role of docker/k8s/rbac.yaml, rule by rule (tests/unit/cli/test_doctor.py keeps them equal;
# the YAML is not package data, and the installed doctor must know the list).
REQUIRED_PERMISSIONS: tuple[Permission, ...] = (
    *_permissions("batch.volcano.sh", "jobs", "create get list watch patch delete"),
    *_permissions("scheduling.volcano.sh", "podgroups", "list"),
    *_permissions("", "pods", "list watch"),
    *_permissions("", "pods/log", "get"),
    *_permissions("", "events", "list"),
    *_permissions("", "secrets", "create"),
)
# What creating each job's key Secret takes: all of it is unused, and should not be
# granted, when every DAG passes ``wandb_api_key_secret`` (the key never passes through Airflow).
SECRET_PERMISSIONS: tuple[Permission, ...] = tuple(
    p for p in REQUIRED_PERMISSIONS if p.resource == "secrets"
)
# The Role of docker/k8s/rbac-external-key-secret.yaml (tests/unit/cli/test_doctor.py keeps it so).
EXTERNAL_KEY_SECRET_PERMISSIONS: tuple[Permission, ...] = tuple(
    p for p in REQUIRED_PERMISSIONS if p not in SECRET_PERMISSIONS
)
# Optional, cluster-wide: the fit check's reads (a namespaced Role cannot grant them), the
# ClusterRole of docker/k8s/rbac-fit-check.yaml. Without them the check is skipped, not failed.
FIT_CHECK_PERMISSIONS: tuple[Permission, ...] = (
    *_permissions("scheduling.volcano.sh", "queues", "get list"),
    *_permissions("", "nodes", "list"),
)

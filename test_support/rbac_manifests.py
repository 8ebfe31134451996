"""The Roles of docker/k8s/*.yaml as the provider's ``Permission`` sets."""

from __future__ import annotations

from pathlib import Path

import yaml

from airflow_volcano_wandb.cli.permissions import Permission

K8S = Path(__file__).resolve().parents[1] / "docker" / "k8s"


def role_permissions(manifest: str, kind: str = "Role") -> set[Permission]:
    """Every (group, resource, verb) the one Role (or ``kind``) in ``docker/k8s/<manifest>``
    grants."""
    docs = yaml.safe_load_all((K8S / manifest).read_text())
    (role,) = [d for d in docs if d and d["kind"] == kind]
    return {
        Permission(group, resource.partition("/")[0], verb, resource.partition("/")[2])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }

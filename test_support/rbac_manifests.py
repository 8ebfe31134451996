"""The Roles of docker/k8s/*.yaml as the provider's ``Permission`` sets, applied to a namespace,
and a kubeconfig that acts as their ServiceAccount."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml
from kubernetes import client

from airflow_volcano_wandb.cli.permissions import Permission

K8S = Path(__file__).resolve().parents[1] / "docker" / "k8s"
RBAC = K8S / "rbac.yaml"
#: The ServiceAccount the manifests make.
SA = "airflow-volcano-wandb"


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


def apply_rbac(
    admin, namespace: str, drop: tuple[str, str] | None = None, manifest: Path = RBAC
) -> None:
    """Apply rbac.yaml (or ``manifest``) to ``namespace``; ``drop=(resource, verb)`` removes
    one permission."""
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
        if doc["kind"] == "ServiceAccount":
            core.create_namespaced_service_account(namespace, doc)
        elif doc["kind"] == "Role":
            if drop:
                for rule in doc["rules"]:
                    if drop[0] in rule["resources"]:
                        rule["verbs"] = [v for v in rule["verbs"] if v != drop[1]]
                doc["rules"] = [rule for rule in doc["rules"] if rule["verbs"]]  # none: no rule
            rbac.create_namespaced_role(namespace, doc)
        elif doc["kind"] == "RoleBinding":
            rbac.create_namespaced_role_binding(namespace, doc)


def token_kubeconfig(admin, admin_kubeconfig: Path, namespace: str, out: Path) -> Path:
    """A kubeconfig holding a TokenRequest token of the ServiceAccount, and nothing else."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=3600)
    )
    token = (
        client.CoreV1Api(admin)
        .create_namespaced_service_account_token(SA, namespace, request)
        .status.token
    )
    base = yaml.safe_load(admin_kubeconfig.read_text())
    cluster = base["clusters"][0]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster["cluster"]}],
        "users": [{"name": SA, "user": {"token": token}}],
        "contexts": [
            {"name": SA, "context": {"cluster": "local", "user": SA, "namespace": namespace}}
        ],
        "current-context": SA,
    }
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out

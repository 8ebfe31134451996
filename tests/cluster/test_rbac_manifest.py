"""``docker/k8s/rbac.yaml`` on the local cluster: the real authorizer (RBAC) decides.

The manifests are applied to a fresh namespace (their ``namespace: wandb`` rewritten), then
the API server is asked, through SubjectAccessReview and by acting as the ServiceAccount
(impersonation from the admin kubeconfig), what the account may do: everything the provider
calls, and nothing more. ``namespace.yaml`` and the example Secret are checked with a
server-side dry run, so the API server validates them without anything being persisted.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from airflow_volcano_wandb.cli.permissions import REQUIRED_PERMISSIONS
from airflow_volcano_wandb.testing.pytest_plugin import VolcanoCluster

pytestmark = pytest.mark.cluster

K8S = Path(__file__).resolve().parents[2] / "docker" / "k8s"
SA = "airflow-volcano-wandb"
GROUP, VERSION = "batch.volcano.sh", "v1alpha1"

# (verb, group, resource, subresource): what the provider's hooks, operator, sensor and
# trigger call, all in the job's namespace.
NEEDED = [(p.group, p.resource, p.subresource, p.verb) for p in REQUIRED_PERMISSIONS]
# Things the account must not be able to do in its namespace.
REFUSED_HERE = [
    # A GET, PATCH or DELETE answers with the Secret's data: only create is granted.
    ("", "secrets", "", "get"),
    ("", "secrets", "", "patch"),
    ("", "secrets", "", "list"),
    ("", "secrets", "", "watch"),
    ("", "secrets", "", "delete"),
    ("", "events", "", "watch"),
    ("events.k8s.io", "events", "", "list"),
    ("", "pods", "", "create"),
    ("", "pods", "", "delete"),
    ("", "pods", "exec", "create"),
    ("batch.volcano.sh", "jobs", "", "update"),
    ("scheduling.volcano.sh", "podgroups", "", "delete"),
    ("rbac.authorization.k8s.io", "roles", "", "create"),
    ("", "configmaps", "", "get"),
]


def _manifests(name: str, namespace: str) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]
    for doc in docs:
        doc["metadata"]["namespace"] = namespace
        for subject in doc.get("subjects", []):
            subject["namespace"] = namespace
    return docs


@pytest.fixture
def admin(volcano_cluster: VolcanoCluster) -> Iterator[client.ApiClient]:
    with volcano_cluster.api_client() as api:
        yield api


@pytest.fixture
def rbac_namespace(admin: client.ApiClient, volcano_namespace: str) -> str:
    """A fresh namespace with ``rbac.yaml`` applied to it."""
    core, rbac = client.CoreV1Api(admin), client.RbacAuthorizationV1Api(admin)
    for doc in _manifests("rbac.yaml", volcano_namespace):
        kind = doc["kind"]
        if kind == "ServiceAccount":
            core.create_namespaced_service_account(volcano_namespace, doc)
        elif kind == "Role":
            rbac.create_namespaced_role(volcano_namespace, doc)
        elif kind == "RoleBinding":
            rbac.create_namespaced_role_binding(volcano_namespace, doc)
        else:
            raise AssertionError(f"unexpected kind {kind} in rbac.yaml")
    # The authorizer learns new Roles and RoleBindings from its informers, a moment later
    # (longer on a loaded machine): wait until the binding is in effect, then ask.
    deadline = time.monotonic() + 30
    while not _allowed(admin, volcano_namespace, NEEDED[0], volcano_namespace):
        assert time.monotonic() < deadline, "rbac.yaml's RoleBinding never took effect"
        time.sleep(0.2)
    return volcano_namespace


def _allowed(
    admin: client.ApiClient, namespace: str, rule: tuple[str, str, str, str], sa_ns: str
) -> bool:
    group, resource, subresource, verb = rule
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{sa_ns}:{SA}",
            groups=[
                "system:serviceaccounts",
                f"system:serviceaccounts:{sa_ns}",
                "system:authenticated",
            ],
            resource_attributes=client.V1ResourceAttributes(
                namespace=namespace,
                group=group,
                resource=resource,
                subresource=subresource or None,
                verb=verb,
            ),
        )
    )
    result = client.AuthorizationV1Api(admin).create_subject_access_review(review)
    return bool(result.status.allowed)


def test_service_account_may_do_what_the_provider_needs(
    admin: client.ApiClient, rbac_namespace: str
) -> None:
    refused = [r for r in NEEDED if not _allowed(admin, rbac_namespace, r, rbac_namespace)]
    assert not refused, f"rbac.yaml misses: {refused}"


def test_service_account_may_do_nothing_else(admin: client.ApiClient, rbac_namespace: str) -> None:
    allowed_here = [r for r in REFUSED_HERE if _allowed(admin, rbac_namespace, r, rbac_namespace)]
    assert not allowed_here, f"rbac.yaml grants more than needed: {allowed_here}"
    # Nothing in any other namespace, nor cluster-wide ("" namespace = all namespaces).
    for other in ("default", "kube-system", ""):
        leaked = [r for r in NEEDED if _allowed(admin, other, r, rbac_namespace)]
        assert not leaked, f"rbac.yaml grants {leaked} in namespace {other!r}"
    cluster_scoped = [
        ("", "nodes", "", "list"),
        ("", "namespaces", "", "list"),
        ("scheduling.volcano.sh", "queues", "", "list"),
    ]
    leaked = [r for r in cluster_scoped if _allowed(admin, "", r, rbac_namespace)]
    assert not leaked, f"rbac.yaml grants cluster-scoped access: {leaked}"


def test_acting_as_the_service_account_on_a_real_volcano_job(
    volcano_cluster: VolcanoCluster, rbac_namespace: str
) -> None:
    """Impersonate the account and do the provider's calls for real (and one it may not)."""
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    job = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "metadata": {"name": name, "namespace": rbac_namespace},
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "master",
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {"name": "master", "image": "registry.invalid/trainer:test"}
                            ],
                        }
                    },
                }
            ],
        },
    }
    with volcano_cluster.api_client() as api:
        api.set_default_header("Impersonate-User", f"system:serviceaccount:{rbac_namespace}:{SA}")
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        created = custom.create_namespaced_custom_object(
            GROUP, VERSION, rbac_namespace, "jobs", job
        )
        # The key's Secret, created after its job and owned by it from the create on.
        owner = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "Job",
            "name": name,
            "uid": created["metadata"]["uid"],
            "blockOwnerDeletion": False,
            "controller": False,
        }
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{name}-wandb", "ownerReferences": [owner]},
            "immutable": True,
            "stringData": {"api-key": "not-a-real-key"},
        }
        core.create_namespaced_secret(rbac_namespace, secret)
        custom.get_namespaced_custom_object(GROUP, VERSION, rbac_namespace, "jobs", name)
        custom.list_namespaced_custom_object(GROUP, VERSION, rbac_namespace, "jobs")
        custom.list_namespaced_custom_object(
            "scheduling.volcano.sh", "v1beta1", rbac_namespace, "podgroups"
        )
        core.list_namespaced_pod(rbac_namespace, label_selector=f"volcano.sh/job-name={name}")
        core.list_namespaced_event(rbac_namespace)
        with pytest.raises(ApiException) as refused:
            core.list_namespaced_secret(rbac_namespace)
        assert refused.value.status == 403
        with pytest.raises(ApiException) as refused:
            custom.list_namespaced_custom_object(GROUP, VERSION, "default", "jobs")
        assert refused.value.status == 403
        # The Secret goes with its job (garbage collection): the account cannot delete it.
        custom.delete_namespaced_custom_object(GROUP, VERSION, rbac_namespace, "jobs", name)


def test_namespace_and_example_secret_pass_server_side_validation(
    admin: client.ApiClient, volcano_namespace: str
) -> None:
    core = client.CoreV1Api(admin)
    (namespace,) = [d for d in yaml.safe_load_all((K8S / "namespace.yaml").read_text()) if d]
    namespace = copy.deepcopy(namespace)
    namespace["metadata"]["name"] = f"{volcano_namespace}-dry"
    core.create_namespace(namespace, dry_run="All")
    (secret,) = _manifests("wandb-secret.example.yaml", volcano_namespace)
    created = core.create_namespaced_secret(volcano_namespace, secret, dry_run="All")
    assert created.metadata.name == "wandb-api-key"

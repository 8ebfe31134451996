"""docs/helm.md cannot drift from the manifests and the code: its YAML blocks are parsed and
held to docker/k8s/, to the permissions ``doctor`` checks (cli/permissions.py), to the
provider's config options and to the seed template."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_volcano_wandb import get_provider_info
from airflow_volcano_wandb.cli.permissions import FIT_CHECK_PERMISSIONS, REQUIRED_PERMISSIONS
from test_support.rbac_manifests import K8S, role_permissions

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "helm.md"
BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.M | re.S)
RELEASE_NAMESPACE = "airflow"
#: The chart's service accounts that submit, wait and clean up: workers (and KubernetesExecutor
#: task pods), the triggerer, and the scheduler under LocalExecutor.
WAITERS = {"airflow-worker", "airflow-triggerer", "airflow-scheduler"}
#: Those that submit, so run the fit check: not the triggerer.
SUBMITTERS = {"airflow-worker", "airflow-scheduler"}


def _documents() -> list[dict[str, Any]]:
    blocks = BLOCK.findall(PAGE.read_text())
    assert blocks, "docs/helm.md has no yaml block"
    return [d for block in blocks for d in yaml.safe_load_all(block) if d]


def _only(kind: str) -> dict[str, Any]:
    (doc,) = [d for d in _documents() if d.get("kind") == kind]
    return doc


def _values() -> dict[str, Any]:
    (values,) = [d for d in _documents() if "images" in d]
    return values


def _manifest(name: str, kind: str) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all((K8S / name).read_text()) if d and d["kind"] == kind]
    return doc


def _service_accounts(binding: dict[str, Any]) -> set[str]:
    subjects = binding["subjects"]
    assert all(s["kind"] == "ServiceAccount" for s in subjects)
    assert {s["namespace"] for s in subjects} == {RELEASE_NAMESPACE}
    return {s["name"] for s in subjects}


def test_the_role_binding_binds_the_doctors_role_to_the_charts_accounts():
    binding, role = _only("RoleBinding"), _manifest("rbac.yaml", "Role")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": role["metadata"]["name"],
    }
    assert binding["metadata"]["namespace"] == role["metadata"]["namespace"]
    assert role_permissions("rbac.yaml") == set(REQUIRED_PERMISSIONS)
    assert _service_accounts(binding) == WAITERS
    # The example manifest binds the same accounts to the same Role.
    example = _manifest("rbac-helm-binding.example.yaml", "RoleBinding")
    assert example["roleRef"] == binding["roleRef"]
    assert _service_accounts(example) == WAITERS


def test_the_fit_checks_binding_names_its_cluster_role_and_the_submitters():
    binding = _only("ClusterRoleBinding")
    cluster_role = _manifest("rbac-fit-check.yaml", "ClusterRole")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": cluster_role["metadata"]["name"],
    }
    assert role_permissions("rbac-fit-check.yaml", kind="ClusterRole") == set(FIT_CHECK_PERMISSIONS)
    assert _service_accounts(binding) == SUBMITTERS


def test_the_values_name_the_image_the_connections_and_only_real_settings():
    values = _values()
    image = values["images"]["airflow"]
    assert image["repository"] and image["tag"] not in ("", "latest")
    env = {e["name"]: e["value"] for e in values["env"]}
    kubernetes = json.loads(env["AIRFLOW_CONN_KUBERNETES_DEFAULT"])
    assert kubernetes["conn_type"] == "kubernetes" and kubernetes["extra"]["in_cluster"] is True
    # The W&B key never appears in the values: it comes from a Secret.
    assert not any("WANDB" in name for name in env)
    (wandb,) = values["secret"]
    assert wandb["envName"] == "AIRFLOW_CONN_WANDB_DEFAULT" and wandb["secretName"]
    options = get_provider_info()["config"]["volcano_wandb"]["options"]
    assert set(values["config"]["volcano_wandb"]) <= set(options)
    assert values["config"]["operators"]["default_deferrable"] == "True"
    assert values["triggerer"]["enabled"] is True


def test_the_network_policy_covers_the_seeds_master_port_and_https():
    policy = _only("NetworkPolicy")
    assert (
        policy["metadata"]["namespace"]
        == _manifest("namespace.yaml", "Namespace")["metadata"]["name"]
    )
    seed = yaml.safe_load((ROOT / "dags/templates/volcano-pytorch-queue-template.yaml").read_text())
    (port,) = [a.split("=")[1] for a in seed["spec"]["plugins"]["pytorch"] if "--port" in a]
    assert f"--port={port}" in PAGE.read_text() and f"({port})" in PAGE.read_text()
    # Ingress between the job's pods is not narrowed to ports: the collectives use their own.
    (ingress,) = policy["spec"]["ingress"]
    assert "ports" not in ingress
    egress_ports = {p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])}
    assert {53, 443} <= egress_ports


@pytest.mark.parametrize("page", ["README.md", "docs/cluster.md"])
def test_the_page_is_linked(page):
    assert "helm.md" in (ROOT / page).read_text()

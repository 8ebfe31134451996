"""Static checks of ``docker/``: what the Dockerfiles run, and the Kubernetes manifests.

No Docker engine exists here, so the Dockerfiles are never built; these tests pin down what
they would run so that ``tests/trainer`` (which runs ``python launch.py`` directly) and the
project's own install test the same thing. ``tests/cluster/test_rbac_manifest.py`` applies the
RBAC manifest to the local cluster and asks its real authorizer.
"""

from __future__ import annotations

import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

from airflow_volcano_wandb.cli.permissions import REQUIRED_PERMISSIONS
from airflow_volcano_wandb.versions import AIRFLOW_VERSION

REPO = Path(__file__).resolve().parents[2]
DOCKER = REPO / "docker"
SEED_NAMESPACE = "wandb"
SERVICE_ACCOUNT = "airflow-volcano-wandb"

# The least-privilege rules the provider needs (see the comments in rbac.yaml for why).
# The one list of what the provider calls (the doctor checks the same list on a cluster).
EXPECTED_RULES: dict[tuple[str, str], set[str]] = {}
for _permission in REQUIRED_PERMISSIONS:
    _resource = "/".join(filter(None, (_permission.resource, _permission.subresource)))
    EXPECTED_RULES.setdefault((_permission.group, _resource), set()).add(_permission.verb)


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DOCKER / "k8s" / name).read_text()) if d]


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with line continuations joined and comments dropped."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    pairs = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            pairs.append((word.upper(), rest.strip()))
    return pairs


def test_trainer_dockerfile_runs_the_launcher_beside_train_py() -> None:
    steps = _instructions(DOCKER / "trainer" / "Dockerfile")
    (entrypoint,) = [json.loads(arg) for word, arg in steps if word == "ENTRYPOINT"]
    # launch.py finds train.py beside itself, and train.py imports its modules from beside
    # itself: every Python file of the trainer lands in /app.
    assert entrypoint == ["python", "/app/launch.py"]
    trainer_files = sorted(path.name for path in (DOCKER / "trainer").glob("*.py"))
    (copy,) = [arg.split() for word, arg in steps if word == "COPY" and arg.endswith(" /app/")]
    assert sorted(copy[:-1]) == trainer_files
    args = dict(arg.split("=", 1) for word, arg in steps if word == "ARG" and "=" in arg)
    assert args["PYTHON_VERSION"] == "3.11" and args["TORCH_VARIANT"] == "cpu"
    (base,) = [arg for word, arg in steps if word == "FROM"]
    assert base == "python:${PYTHON_VERSION}-slim"


def test_trainer_requirements_match_what_the_tests_run() -> None:
    """The torch and wandb the trainer tests use must be versions the image would install."""
    reqs = [
        Requirement(line)
        for line in (DOCKER / "trainer" / "requirements.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert {r.name for r in reqs} == {"torch", "wandb"}
    for req in reqs:
        try:
            installed = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            pytest.fail(f"{req.name} is not installed; install the project's 'train' extra")
        assert req.specifier.contains(installed, prereleases=True), (
            f"{req.name} {installed} is outside the image's range {req.specifier}"
        )


def test_airflow_dockerfile_installs_the_provider_from_the_repo() -> None:
    steps = _instructions(DOCKER / "airflow" / "Dockerfile")
    # The image runs the Airflow release the project is tested with.
    assert ("FROM", f"apache/airflow:{AIRFLOW_VERSION}-python3.11") in steps
    copies = [arg for word, arg in steps if word == "COPY"]
    assert any(arg.split()[-2:] == [".", "/src"] for arg in copies)
    runs = [arg for word, arg in steps if word == "RUN"]
    assert any("pip install" in arg and arg.rstrip().endswith("/src") for arg in runs)
    # The build context is the repo root: it must hold what `pip install /src` needs.
    assert (REPO / "pyproject.toml").is_file()
    ignored = (DOCKER / "airflow" / "Dockerfile.dockerignore").read_text().split()
    assert ".venv" in ignored and ".state" in ignored


def test_namespace_is_the_seed_templates() -> None:
    (namespace,) = _docs("namespace.yaml")
    assert namespace["kind"] == "Namespace"
    assert namespace["metadata"]["name"] == SEED_NAMESPACE


@pytest.mark.parametrize(
    ("manifest", "secrets"),
    [("rbac.yaml", True), ("rbac-external-key-secret.yaml", False)],
)
def test_rbac_is_namespaced_least_privilege(manifest: str, secrets: bool) -> None:
    docs = _docs(manifest)
    kinds = sorted(d["kind"] for d in docs)
    assert kinds == ["Role", "RoleBinding", "ServiceAccount"], "nothing cluster-wide"
    for doc in docs:
        assert doc["metadata"]["namespace"] == SEED_NAMESPACE
        assert doc["metadata"]["name"] == SERVICE_ACCOUNT
    (role,) = [d for d in docs if d["kind"] == "Role"]
    granted: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        assert "*" not in rule["verbs"] and "*" not in rule["resources"]
        assert "resourceNames" not in rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                granted.setdefault((group, resource), set()).update(rule["verbs"])
    expected = {k: v for k, v in EXPECTED_RULES.items() if secrets or k != ("", "secrets")}
    assert granted == expected
    (binding,) = [d for d in docs if d["kind"] == "RoleBinding"]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": SERVICE_ACCOUNT,
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SEED_NAMESPACE}
    ]


def test_wandb_secret_is_a_clearly_marked_example() -> None:
    path = DOCKER / "k8s" / "wandb-secret.example.yaml"
    assert "EXAMPLE" in path.read_text().splitlines()[0]
    (secret,) = _docs(path.name)
    assert secret["kind"] == "Secret"
    assert secret["metadata"] == {
        "name": "wandb-api-key",
        "namespace": SEED_NAMESPACE,
        "labels": {"app.kubernetes.io/part-of": "airflow-volcano-wandb"},
    }
    assert list(secret["stringData"]) == ["api-key"]
    assert secret["stringData"]["api-key"].startswith("REPLACE-WITH")

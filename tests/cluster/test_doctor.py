"""``python -m airflow_volcano_wandb doctor`` against the local Volcano cluster.

The doctor runs as a separate process, as a user would run it, with Airflow connections in
the environment: the admin kubeconfig (a complete setup), the least-privilege ServiceAccount of
``docker/k8s/rbac.yaml`` or of ``rbac-external-key-secret.yaml`` (checked with and without
``--external-key-secret``), and crippled setups (a ServiceAccount with no Role, a queue that
does not exist, a W&B key W&B refuses), each of which must fail on its own line and only there.
W&B is the stand-in (``test_support/wandb_standin.py``), asked by the doctor over HTTP.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from airflow_volcano_wandb.cli.permissions import (
    EXTERNAL_KEY_SECRET_PERMISSIONS,
    REQUIRED_PERMISSIONS,
)
from airflow_volcano_wandb.versions import VOLCANO_VERSION
from test_support.rbac_manifests import RBAC, SA, apply_rbac, token_kubeconfig
from test_support.wandb_standin import WandbStandin

EXTERNAL_KEY_RBAC = RBAC.with_name("rbac-external-key-secret.yaml")
SEED_TEMPLATE = (
    Path(__file__).resolve().parents[2] / "dags/templates/volcano-pytorch-queue-template.yaml"
)

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
KEY = "k" * 40


@pytest.fixture(scope="module")
def wandb():
    """The W&B stand-in, and the connection's (host, key) that it accepts."""
    with WandbStandin(api_key=KEY) as server:
        yield server.url, KEY


def _doctor(
    kubeconfig: Path,
    namespace: str | None,
    *,
    queue: str = "default",
    wandb: tuple[str, str] | None = None,
    external_key_secret: bool = False,
    volcano_version: str | None = None,
    extra_args: tuple[str, ...] = (),
    wandb_mode: str | None = None,
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
            {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        ),
    }
    env.pop("WANDB_MODE", None)  # the doctor must judge the W&B connection, not offline mode
    if wandb_mode is not None:
        env["WANDB_MODE"] = wandb_mode
    env.pop("AIRFLOW_CONN_WANDB_DEFAULT", None)
    env.pop("AIRFLOW__VOLCANO_WANDB__VOLCANO_VERSION", None)
    if volcano_version is not None:
        env["AIRFLOW__VOLCANO_WANDB__VOLCANO_VERSION"] = volcano_version
    if wandb is not None:
        env["AIRFLOW_CONN_WANDB_DEFAULT"] = json.dumps(
            {"conn_type": "wandb", "host": wandb[0], "password": wandb[1]}
        )
    args = ["doctor", "--conn-id", "kubernetes_default", *extra_args]
    if namespace is not None:
        args += ["--namespace", namespace]
    if external_key_secret:
        args.append("--external-key-secret")
    return subprocess.run(
        [sys.executable, "-m", "airflow_volcano_wandb", *args, "--queue", queue],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _line(out: str, name: str) -> str:
    (line,) = [x for x in out.splitlines() if f"  {name}" in x]
    return line


def test_a_complete_setup_passes_on_the_standin(
    airflow_db, volcano_cluster, volcano_namespace, wandb
):
    result = _doctor(volcano_cluster.kubeconfig, volcano_namespace, wandb=wandb)
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("Volcano CRDs", "Volcano admission webhooks", "Volcano queue 'default'"):
        assert _line(result.stdout, name).startswith("OK"), result.stdout
    assert _line(result.stdout, f"namespace '{volcano_namespace}'").startswith("OK")
    assert _line(result.stdout, "RBAC in namespace").startswith("OK"), result.stdout
    assert _line(result.stdout, "W&B connection 'wandb_default'") == (
        f"OK    W&B connection 'wandb_default': has an API key, and W&B accepts it ({wandb[0]}, "
        "entity 'standin-user')"
    )
    assert _line(result.stdout, "Airflow components").startswith(
        "OK    Airflow components: install the provider on the scheduler, workers, triggerer, "
        "DAG processor, API server; a triggerer is needed"
    )
    # The cluster runs the release versions.py names, the default target.
    assert _line(result.stdout, "Volcano version") == (
        f"OK    Volcano version: installed {VOLCANO_VERSION}, jobs are rendered for "
        f"{VOLCANO_VERSION}"
    )
    assert "all checks passed" in result.stdout


def test_a_target_older_than_the_installed_volcano_is_a_warning_on_the_standin(
    airflow_db, volcano_cluster, volcano_namespace, wandb
):
    result = _doctor(
        volcano_cluster.kubeconfig, volcano_namespace, wandb=wandb, volcano_version="1.12.2"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert _line(result.stdout, "Volcano version") == (
        f"WARN  Volcano version: installed {VOLCANO_VERSION}, jobs are rendered for v1.12.2: "
        "torchrun gets no PET_NODE_RANK (no hcclrank plugin)"
    )
    assert f"volcano_version) to {VOLCANO_VERSION}" in result.stdout


def test_a_target_that_is_no_release_fails_on_the_standin(
    airflow_db, volcano_cluster, volcano_namespace, wandb
):
    result = _doctor(
        volcano_cluster.kubeconfig, volcano_namespace, wandb=wandb, volcano_version="v2"
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert _line(result.stdout, "Volcano version").startswith(
        "FAIL  Volcano version: [volcano_wandb] volcano_version: 'v2' is not a Volcano version"
    )


def test_a_namespace_that_does_not_exist_fails_on_its_line_on_the_standin(
    airflow_db, volcano_cluster, wandb
):
    result = _doctor(volcano_cluster.kubeconfig, "no-such-namespace", wandb=wandb)
    assert result.returncode == 1, result.stdout + result.stderr
    assert _line(result.stdout, "namespace 'no-such-namespace'").startswith(
        "FAIL  namespace 'no-such-namespace': does not exist"
    )


def test_a_queue_that_does_not_exist_fails_on_its_line_on_the_standin(
    airflow_db, volcano_cluster, volcano_namespace
):
    result = _doctor(volcano_cluster.kubeconfig, volcano_namespace, queue="no-such-queue")
    assert result.returncode == 1, result.stdout + result.stderr
    assert _line(result.stdout, "Volcano queue").startswith(
        "FAIL  Volcano queue 'no-such-queue': does not exist"
    )
    assert _line(result.stdout, "RBAC in namespace").startswith("OK")
    # No W&B connection and no offline mode: a warning, which alone does not fail.
    assert _line(result.stdout, "W&B connection").startswith("WARN")
    assert "runs must use WANDB_MODE=offline" in result.stdout


@pytest.fixture
def service_account(volcano_cluster, volcano_namespace, tmp_path):
    """A factory: the kubeconfig of a ServiceAccount in the test namespace, with or without
    rbac.yaml's Role (or ``manifest``'s) bound to it."""
    with volcano_cluster.api_client() as admin:

        def make(with_role: bool, manifest: Path = RBAC) -> Path:
            if with_role:
                apply_rbac(admin, volcano_namespace, manifest=manifest)
            else:
                client.CoreV1Api(admin).create_namespaced_service_account(
                    volcano_namespace, {"metadata": {"name": SA}}
                )
            return token_kubeconfig(
                admin, volcano_cluster.kubeconfig, volcano_namespace, tmp_path / "sa.kubeconfig"
            )

        yield make


def test_the_least_privilege_service_account_passes_on_the_standin(
    airflow_db, service_account, volcano_namespace, wandb
):
    result = _doctor(service_account(with_role=True), volcano_namespace, wandb=wandb)
    assert result.returncode == 0, result.stdout + result.stderr
    assert _line(result.stdout, "RBAC in namespace").startswith("OK"), result.stdout
    assert _line(result.stdout, "Volcano CRDs").startswith("OK"), result.stdout
    # Cluster-scoped objects are beyond a namespaced Role: said, not failed.
    assert _line(result.stdout, "Volcano admission webhooks").startswith("WARN")
    assert _line(result.stdout, "Volcano queue").startswith("WARN")
    assert _line(result.stdout, "Volcano version") == (
        "WARN  Volcano version: the installed release is unknown: this identity may not list "
        "Deployments in 'volcano-system' (expected for the least-privilege Role); jobs are "
        f"rendered for {VOLCANO_VERSION}"
    )


def test_a_service_account_without_its_role_fails_on_rbac_on_the_standin(
    airflow_db, service_account, volcano_namespace, wandb
):
    result = _doctor(service_account(with_role=False), volcano_namespace, wandb=wandb)
    assert result.returncode == 1, result.stdout + result.stderr
    line = _line(result.stdout, "RBAC in namespace")
    every = len(REQUIRED_PERMISSIONS)
    assert line.startswith(
        f"FAIL  RBAC in namespace '{volcano_namespace}': denied {every} of {every}:"
    )
    assert "create jobs.batch.volcano.sh" in line and "get pods/log" in line
    assert "fix: apply docker/k8s/rbac.yaml" in result.stdout
    assert _line(result.stdout, "Volcano CRDs").startswith("OK"), result.stdout


def test_the_external_key_secret_role_passes_only_the_narrower_check_on_the_standin(
    airflow_db, service_account, volcano_namespace, wandb
):
    kubeconfig = service_account(with_role=True, manifest=EXTERNAL_KEY_RBAC)
    narrow = _doctor(kubeconfig, volcano_namespace, wandb=wandb, external_key_secret=True)
    assert narrow.returncode == 0, narrow.stdout + narrow.stderr
    every = len(EXTERNAL_KEY_SECRET_PERMISSIONS)
    assert _line(narrow.stdout, "RBAC in namespace").startswith(
        f"OK    RBAC in namespace '{volcano_namespace}': all {every} permissions of "
        "rbac-external-key-secret.yaml granted"
    ), narrow.stdout
    # The default check asks for Secret write, which this Role has not: those lines fail.
    default = _doctor(kubeconfig, volcano_namespace, wandb=wandb)
    assert default.returncode == 1, default.stdout + default.stderr
    assert _line(default.stdout, "RBAC in namespace").endswith(
        f"denied 1 of {len(REQUIRED_PERMISSIONS)}: create secrets"
    ), default.stdout


def test_the_default_role_passes_the_narrower_check_with_a_warning_on_the_standin(
    airflow_db, service_account, volcano_namespace, wandb
):
    kubeconfig = service_account(with_role=True)
    result = _doctor(kubeconfig, volcano_namespace, wandb=wandb, external_key_secret=True)
    assert result.returncode == 0, result.stdout + result.stderr
    line = _line(result.stdout, "RBAC in namespace")
    assert line.startswith("WARN") and "and also create secrets: not needed" in line, line
    assert "fix: bind docker/k8s/rbac-external-key-secret.yaml's Role" in result.stdout


def test_a_key_wandb_refuses_fails_on_its_line_and_is_never_printed_on_the_standin(
    airflow_db, volcano_cluster, volcano_namespace, wandb
):
    wrong = "w" * 40
    result = _doctor(volcano_cluster.kubeconfig, volcano_namespace, wandb=(wandb[0], wrong))
    assert result.returncode == 1, result.stdout + result.stderr
    assert _line(result.stdout, "W&B connection").startswith(
        f"FAIL  W&B connection 'wandb_default': has an API key, and W&B refuses it: {wandb[0]} "
        "answered HTTP 401"
    )
    assert [x for x in result.stdout.splitlines() if x.startswith("FAIL")] == [
        _line(result.stdout, "W&B connection")
    ]
    assert wrong not in result.stdout + result.stderr


def test_offline_in_the_airflow_environment_needs_no_key_on_the_standin(
    airflow_db, volcano_cluster, volcano_namespace
):
    offline = _doctor(volcano_cluster.kubeconfig, volcano_namespace, wandb_mode="offline")
    verdicts = dict(line.split(": ", 1) for line in offline.stdout.splitlines() if ": " in line)
    said = verdicts["OK    W&B connection 'wandb_default'"]
    assert said.startswith("no API key, fine: WANDB_MODE is offline here"), offline.stdout
    assert offline.returncode == 0, offline.stdout + offline.stderr


def test_the_namespace_is_the_seeds_else_the_templates_on_the_standin(
    airflow_db, volcano_cluster, volcano_namespace, wandb, tmp_path
):
    seed = _doctor(volcano_cluster.kubeconfig, None, wandb=wandb)
    assert seed.stdout.startswith(
        "doctor: connection 'kubernetes_default', namespace 'wandb' (the seed template's)"
    ), seed.stdout
    template = yaml.safe_load(SEED_TEMPLATE.read_text())
    template["metadata"]["namespace"] = volcano_namespace
    path = tmp_path / "template.yaml"
    path.write_text(yaml.safe_dump(template))
    result = _doctor(
        volcano_cluster.kubeconfig, None, wandb=wandb, extra_args=("--template", str(path))
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(
        f"doctor: connection 'kubernetes_default', namespace '{volcano_namespace}' (the template's)"
    ), result.stdout
    assert _line(result.stdout, f"namespace '{volcano_namespace}'").startswith("OK")

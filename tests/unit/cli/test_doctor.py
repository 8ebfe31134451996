"""The doctor's verdicts, over objects shaped like what the API server returns."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.cli import doctor, permissions, report, volcano_checks, volcano_install
from airflow_volcano_wandb.cli.permissions import REQUIRED_PERMISSIONS, Permission
from airflow_volcano_wandb.cli.report import FAIL, OK, WARN
from test_support.rbac_manifests import role_permissions

SERVED = {
    "batch.volcano.sh/v1alpha1": ["jobs", "jobs/status"],
    "scheduling.volcano.sh/v1beta1": ["podgroups", "queues", "queues/status"],
}


def _webhook_config(group: str, resource: str) -> dict:
    return {"webhooks": [{"rules": [{"apiGroups": [group], "resources": [resource]}]}]}


@pytest.mark.parametrize(
    ("manifest", "permissions"),
    [
        ("rbac.yaml", permissions.REQUIRED_PERMISSIONS),
        ("rbac-external-key-secret.yaml", permissions.EXTERNAL_KEY_SECRET_PERMISSIONS),
    ],
)
def test_the_doctors_lists_are_exactly_the_roles(manifest, permissions):
    in_yaml = role_permissions(manifest)
    assert set(permissions) == in_yaml
    assert len(permissions) == len(in_yaml)  # no duplicates


def test_the_fit_checks_optional_reads_are_exactly_its_cluster_role():
    in_yaml = role_permissions("rbac-fit-check.yaml", kind="ClusterRole")
    assert set(permissions.FIT_CHECK_PERMISSIONS) == in_yaml
    assert len(permissions.FIT_CHECK_PERMISSIONS) == len(in_yaml)


def test_apis_ok_when_served():
    assert volcano_checks.check_apis(SERVED).status == OK


def test_apis_name_what_is_missing_and_how_to_install_volcano():
    result = volcano_checks.check_apis({"batch.volcano.sh/v1alpha1": ["jobs"]})
    assert result.status == FAIL
    assert "podgroups.scheduling.volcano.sh, queues.scheduling.volcano.sh" in result.detail
    assert "helm install volcano volcano-sh/volcano" in result.hint
    assert "--version 1.14.1" in result.hint


def test_webhooks_need_a_mutating_and_a_validating_one_for_jobs():
    jobs = _webhook_config("batch.volcano.sh", "jobs")
    pods = _webhook_config("", "pods")
    assert volcano_checks.check_webhooks([jobs], [pods, jobs]).status == OK
    result = volcano_checks.check_webhooks([pods], [jobs])
    assert result.status == FAIL
    assert result.detail.startswith("no mutating webhook")
    assert volcano_checks.check_webhooks([], []).detail.startswith(
        "no mutating or validating webhook"
    )


def test_webhooks_unreadable_is_a_warning_not_a_failure():
    assert volcano_checks.check_webhooks(None, None).status == WARN


@pytest.mark.parametrize(
    ("queue", "status", "words"),
    [
        ({"status": {"state": "Open"}}, OK, "exists and is Open"),
        ({"status": {"state": "Closed"}}, FAIL, "state is Closed"),
        ({}, FAIL, "state is unknown"),
        (None, FAIL, "does not exist"),
    ],
)
def test_queue(queue, status, words):
    result = volcano_checks.check_queue("default", queue)
    assert (result.status, words in result.detail) == (status, True)


def test_queue_unreadable_is_a_warning():
    assert volcano_checks.check_queue("default", None, readable=False).status == WARN


@pytest.mark.parametrize(("exists", "status"), [(True, OK), (None, OK), (False, FAIL)])
def test_namespace(exists, status):
    assert doctor.check_namespace("wandb", exists).status == status


def test_permissions_list_each_denied_one():
    allowed = dict.fromkeys(permissions.REQUIRED_PERMISSIONS, True)
    assert doctor.check_permissions(allowed, "wandb").status == OK
    allowed[Permission("batch.volcano.sh", "jobs", "create")] = False
    allowed[Permission("", "pods", "get", "log")] = False
    result = doctor.check_permissions(allowed, "wandb")
    assert result.status == FAIL
    denied = f"denied 2 of {len(REQUIRED_PERMISSIONS)}: create jobs.batch.volcano.sh, get pods/log"
    assert denied in result.detail
    assert "rbac.yaml" in result.hint


def test_permissions_for_an_external_key_secret_need_no_secret_access():
    narrow = dict.fromkeys(permissions.EXTERNAL_KEY_SECRET_PERMISSIONS, True)
    result = doctor.check_permissions(narrow, "wandb", external_key_secret=True)
    assert result.status == OK, result
    assert "rbac-external-key-secret.yaml" in result.detail
    # The same grants fail the default check, on exactly the Secret lines.
    result = doctor.check_permissions(narrow, "wandb")
    assert result.status == FAIL
    assert result.detail.endswith(": create secrets")
    # The wide Role passes the narrow check, with a warning naming what is not needed.
    wide = dict.fromkeys(permissions.REQUIRED_PERMISSIONS, True)
    result = doctor.check_permissions(wide, "wandb", external_key_secret=True)
    assert result.status == WARN
    assert "create secrets: not needed" in result.detail
    assert "rbac-external-key-secret.yaml" in result.hint
    narrow[Permission("", "pods", "list")] = False
    result = doctor.check_permissions(narrow, "wandb", external_key_secret=True)
    assert result.status == FAIL
    assert f"denied 1 of {len(narrow)}: list pods" in result.detail
    assert "apply docker/k8s/rbac-external-key-secret.yaml" in result.hint


@pytest.mark.parametrize(
    ("exists", "has_key", "offline", "status"),
    [
        (True, True, False, OK),
        (True, False, True, OK),
        (False, False, True, OK),
        (False, False, False, WARN),
        (True, False, False, FAIL),
    ],
)
def test_wandb(exists, has_key, offline, status):
    assert doctor.check_wandb("wandb_default", exists, has_key, offline).status == status


def test_exit_code_fails_only_on_a_failure():
    warn = report.Result("a", WARN, "x", "y")
    fail = report.Result("b", FAIL, "x", "y")
    assert report.exit_code([warn]) == 0
    assert report.exit_code([warn, fail]) == 1


def test_a_line_carries_the_hint_unless_ok():
    assert report.Result("a", FAIL, "broken", "do this").line() == (
        "FAIL  a: broken\n      fix: do this"
    )
    assert report.Result("a", OK, "fine", "do this").line() == "OK    a: fine"


def test_an_unreachable_cluster_is_one_failing_line():
    error = ConnectionRefusedError("[Errno 111] Connection refused\nmore detail")
    result = doctor.unreachable("kubernetes_default", error)
    assert result.status == FAIL
    assert result.detail == (
        "cannot query the API server: ConnectionRefusedError: [Errno 111] Connection refused"
    )


def test_the_identity_is_named_and_a_service_account_read_from_it():
    worker = "system:serviceaccount:airflow:airflow-worker"
    assert doctor.service_account_of(worker) == ("airflow", "airflow-worker")
    assert doctor.service_account_of("kubernetes-admin") is None
    assert doctor.check_identity(worker).detail == (
        "service account 'airflow-worker' of namespace 'airflow'"
    )
    assert doctor.check_identity(None).status == WARN


def test_a_missing_binding_names_the_account_to_bind():
    """Airflow's Helm chart runs workers as accounts of their own, in Airflow's namespace: the
    hint says which one the RoleBinding in the jobs' namespace must name."""
    result = doctor.check_permissions(
        {}, "wandb", identity="system:serviceaccount:airflow:airflow-triggerer"
    )
    assert result.status == FAIL
    assert "name 'airflow-triggerer', namespace 'airflow'" in result.hint
    assert "rbac-helm-binding.example.yaml" in result.hint


def _deployment(*images: str) -> dict:
    containers = [{"name": f"c{i}", "image": image} for i, image in enumerate(images)]
    return {"spec": {"template": {"spec": {"containers": containers}}}}


HELM = [
    _deployment("docker.io/volcanosh/vc-controller-manager:v1.12.1"),
    _deployment("docker.io/volcanosh/vc-webhook-manager:v1.11.0@sha256:" + "0" * 64),
]


@pytest.mark.parametrize(
    ("image", "expected"),
    [
        ("volcanosh/vc-webhook-manager:v1.14.1", ("volcanosh/vc-webhook-manager", "v1.14.1")),
        ("reg:5000/volcanosh/vc-webhook-manager", ("reg:5000/volcanosh/vc-webhook-manager", "")),
        ("reg:5000/vc-webhook-manager:1.13@sha256:ab", ("reg:5000/vc-webhook-manager", "1.13")),
    ],
)
def test_an_images_tag_is_read_past_registry_ports_and_digests(image, expected):
    assert volcano_install.repository_and_tag(image) == expected


def test_the_webhooks_image_names_the_installed_release_before_the_controllers():
    assert volcano_install.installed_volcano_image(HELM).endswith(":v1.11.0@sha256:" + "0" * 64)
    assert volcano_install.installed_volcano_image(HELM[:1]).endswith(":v1.12.1")
    assert volcano_install.installed_volcano_image([_deployment("nginx:1.27")]) is None


@pytest.mark.parametrize(
    ("target", "installed", "status", "says"),
    [
        ("v1.14.1", "v1.14.1", OK, "installed v1.14.1, jobs are rendered for v1.14.1"),
        ("v1.13.0", "v1.14.1", OK, "installed v1.14.1, jobs are rendered for v1.13.0"),
        ("v1.14.1", "v1.11.0", FAIL, "would refuse every PyTorch job"),
        ("v1.13.0", "v1.12.3", WARN, "a template naming ray would be refused"),
        ("v1.11.0", "v1.14.1", WARN, "torchrun gets no PET_NODE_RANK"),
    ],
)
def test_the_installed_volcano_against_the_target(target, installed, status, says):
    webhook = _deployment(f"docker.io/volcanosh/vc-webhook-manager:{installed}")
    result = volcano_checks.check_volcano_version(target, [webhook], "volcano-system")
    assert (result.status, says in result.detail) == (status, True), result.detail
    if status != OK:
        assert result.hint.endswith(f"volcano_version) to {installed}")


def test_an_unknown_installed_release_is_said_once_and_does_not_fail():
    for deployments, says in [
        (None, "may not list Deployments in 'volcano-system'"),
        ([], "no vc-webhook-manager or vc-controller-manager Deployment"),
        ([_deployment("volcanosh/vc-webhook-manager:latest")], ":latest names none"),
    ]:
        result = volcano_checks.check_volcano_version("v1.14.1", deployments, "volcano-system")
        assert result.status == WARN
        assert says in result.detail
        assert result.detail.endswith("jobs are rendered for v1.14.1")


def test_a_target_that_is_no_supported_release_fails():
    result = volcano_checks.check_volcano_version("v1.6.0", HELM, "volcano-system")
    assert result.status == FAIL
    assert "older than the oldest supported release, v1.7.0" in result.detail


def test_the_fit_checks_cluster_wide_reads_are_optional_and_said_when_missing():
    granted = dict.fromkeys(permissions.FIT_CHECK_PERMISSIONS, True)
    assert doctor.check_fit_check(granted).status == OK
    missing = {**granted, permissions.FIT_CHECK_PERMISSIONS[-1]: False}
    result = doctor.check_fit_check(missing)
    assert result.status == WARN  # optional: never a FAIL, so the exit code stays 0
    assert "list nodes" in result.detail and "rbac-fit-check.yaml" in result.hint
    assert doctor.check_fit_check({}).status == WARN  # not asked: not granted

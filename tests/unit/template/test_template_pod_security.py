"""Pod Security Standards, allow-lists and template-chosen identity in ``render_job``."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_volcano_wandb.template import POD_SECURITY_LEVELS, TemplateError, render_job
from test_support.pod_security_corpus import CASES, IMAGE, Case, restricted_pod
from test_support.template_cases import MACROS, SEED

P = "spec.tasks[0].template"


def job_for(pod: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "job", **metadata},
        "spec": {"tasks": [{"name": "main", "replicas": 1, "template": pod}]},
    }


def problems(pod: dict[str, Any], **kwargs: Any) -> dict[str, str]:
    with pytest.raises(TemplateError) as info:
        render_job(job_for(pod), macros=MACROS, **kwargs)
    return dict(info.value.problems)


def refused(case: Case, level: str) -> bool:
    try:
        render_job(job_for(case.pod()), macros=MACROS, pod_security=level)
    except TemplateError:
        return True
    return False


# --- levels ---------------------------------------------------------------------------------
@pytest.mark.parametrize("level", POD_SECURITY_LEVELS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_corpus_pod_is_judged_at_every_level(case: Case, level: str) -> None:
    assert refused(case, level) == case.refused_at(level)


def test_baseline_is_the_default() -> None:
    pod = restricted_pod()
    pod["spec"]["hostNetwork"] = True
    with pytest.raises(TemplateError, match="pod security level 'baseline'"):
        render_job(job_for(pod), macros=MACROS)


@pytest.mark.parametrize("level", ["Baseline", "strict", "", None, 1])
def test_unknown_level_is_an_error_naming_pod_security(level: Any) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(SEED, macros=MACROS, pod_security=level, template_namespace_allowed=True)
    assert info.value.path == "pod_security"
    assert "privileged, baseline, restricted" in str(info.value)


def test_the_seed_meets_baseline_but_not_restricted() -> None:
    render_job(SEED, macros=MACROS, template_namespace_allowed=True)
    with pytest.raises(TemplateError) as info:
        render_job(SEED, macros=MACROS, pod_security="restricted", template_namespace_allowed=True)
    paths = {p for p, _ in info.value.problems}
    assert "spec.tasks[1].template.spec.containers[0].securityContext.runAsNonRoot" in paths


# --- every offending field, with its path, in one error ------------------------------------------
def test_every_baseline_violation_is_named_in_one_error() -> None:
    pod = restricted_pod()
    spec = pod["spec"]
    spec.update(hostNetwork=True, hostPID=True, hostIPC=True)
    spec["volumes"] = [{"name": "root", "hostPath": {"path": "/"}}]
    spec["securityContext"] = {
        "windowsOptions": {"hostProcess": True},
        "seccompProfile": {"type": "Unconfined"},
        "seLinuxOptions": {"type": "spc_t", "user": "u", "role": "r"},
        "appArmorProfile": {"type": "Unconfined"},
        "sysctls": [{"name": "kernel.shm_rmid_forced", "value": "1"}, {"name": "vm.x"}],
    }
    pod["metadata"]["annotations"] = {
        "container.apparmor.security.beta.kubernetes.io/main": "unconfined"
    }
    main = spec["containers"][0]
    main["securityContext"].update(
        privileged=True, procMount="Unmasked", capabilities={"add": ["CHOWN", "SYS_ADMIN"]}
    )
    main["ports"] = [{"containerPort": 1, "hostPort": 2}]
    main["readinessProbe"] = {"tcpSocket": {"host": "h", "port": 1}}
    main["lifecycle"] = {"preStop": {"httpGet": {"host": "h", "port": 1}}}
    spec["initContainers"] = [{"name": "i", "image": IMAGE, "securityContext": {"privileged": 1}}]
    spec["ephemeralContainers"] = [
        {"name": "e", "image": IMAGE, "securityContext": {"windowsOptions": {"hostProcess": 1}}}
    ]
    with pytest.raises(TemplateError) as info:
        render_job(job_for(pod), macros=MACROS)
    found = dict(info.value.problems)
    c, sc = f"{P}.spec.containers[0]", f"{P}.spec.securityContext"
    expected = {
        f"{P}.spec.hostNetwork",
        f"{P}.spec.hostPID",
        f"{P}.spec.hostIPC",
        f"{P}.spec.volumes[0].hostPath",
        f"{sc}.windowsOptions.hostProcess",
        f"{sc}.seccompProfile.type",
        f"{sc}.seLinuxOptions.type",
        f"{sc}.seLinuxOptions.user",
        f"{sc}.seLinuxOptions.role",
        f"{sc}.appArmorProfile.type",
        f"{sc}.sysctls[1].name",
        f'{P}.metadata.annotations["container.apparmor.security.beta.kubernetes.io/main"]',
        f"{c}.securityContext.privileged",
        f"{c}.securityContext.procMount",
        f"{c}.securityContext.capabilities.add[1]",
        f"{c}.ports[0].hostPort",
        f"{c}.readinessProbe.tcpSocket.host",
        f"{c}.lifecycle.preStop.httpGet.host",
        f"{P}.spec.initContainers[0].securityContext.privileged",
        f"{P}.spec.ephemeralContainers[0].securityContext.windowsOptions.hostProcess",
    }
    assert set(found) == expected
    text = str(info.value)
    assert text.startswith("the rendered Volcano Job breaks the security policy (20 problem(s))")
    assert all(path in text for path in expected)
    assert "'vm.x' is not one of the safe sysctls" in found[f"{sc}.sysctls[1].name"]
    assert "'SYS_ADMIN' may not be added" in found[f"{c}.securityContext.capabilities.add[1]"]


def test_every_restricted_violation_is_named() -> None:
    pod = restricted_pod()
    pod["spec"]["containers"][0]["securityContext"] = {"capabilities": {"add": ["CHOWN"]}}
    pod["spec"]["securityContext"] = {"runAsNonRoot": False, "runAsUser": 0}
    pod["spec"]["volumes"] = [{"name": "n", "nfs": {"server": "s", "path": "/"}}]
    found = problems(pod, pod_security="restricted")
    sc = f"{P}.spec.containers[0].securityContext"
    assert set(found) == {
        f"{P}.spec.volumes[0].nfs",
        f"{P}.spec.securityContext.runAsNonRoot",
        f"{P}.spec.securityContext.runAsUser",
        f"{sc}.runAsNonRoot",
        f"{sc}.allowPrivilegeEscalation",
        f"{sc}.seccompProfile.type",
        f"{sc}.capabilities.drop",
        f"{sc}.capabilities.add[0]",
    }
    assert "must include ALL" in found[f"{sc}.capabilities.drop"]
    assert "pod security level 'restricted'" in found[f"{sc}.capabilities.drop"]


def test_privileged_checks_nothing() -> None:
    pod = restricted_pod()
    pod["spec"].update(hostNetwork=True, volumes=[{"name": "r", "hostPath": {"path": "/"}}])
    pod["spec"]["containers"][0]["securityContext"] = {"privileged": True}
    render_job(job_for(pod), macros=MACROS, pod_security="privileged")


def test_user_namespace_pods_get_the_standard_relaxations() -> None:
    pod = restricted_pod()
    pod["spec"]["hostUsers"] = False
    pod["spec"]["containers"][0]["securityContext"].update(runAsUser=0, runAsNonRoot=False)
    render_job(job_for(pod), macros=MACROS, pod_security="restricted")
    pod["spec"]["containers"][0]["securityContext"]["procMount"] = "Unmasked"
    render_job(job_for(pod), macros=MACROS, pod_security="baseline")
    assert set(problems(pod, pod_security="restricted")) == {
        f"{P}.spec.containers[0].securityContext.procMount"
    }
    pod["spec"]["hostUsers"] = True  # the node's user namespace: baseline refuses it too
    assert f"{P}.spec.containers[0].securityContext.procMount" in problems(
        pod, pod_security="baseline"
    )


def test_windows_pods_skip_linux_only_restricted_checks() -> None:
    pod = restricted_pod()
    pod["spec"]["os"] = {"name": "windows"}
    pod["spec"]["containers"][0]["securityContext"] = {"runAsNonRoot": True}
    render_job(job_for(pod), macros=MACROS, pod_security="restricted")


def test_mistyped_true_values_are_refused() -> None:
    pod = restricted_pod()
    pod["spec"]["hostNetwork"] = "true"
    assert f"{P}.spec.hostNetwork" in problems(pod)


# --- images ---------------------------------------------------------------------------------
def _with_init(image: str) -> dict[str, Any]:
    pod = restricted_pod()
    pod["spec"]["initContainers"] = [{"name": "init", "image": image}]
    return pod


def test_images_must_match_an_allowed_pattern() -> None:
    patterns = ["registry.example.com/team/*"]
    render_job(job_for(_with_init(IMAGE)), macros=MACROS, allowed_images=patterns)
    found = problems(_with_init("docker.io/evil:1"), allowed_images=patterns)
    assert set(found) == {f"{P}.spec.initContainers[0].image"}
    assert (
        "'docker.io/evil:1' matches none of allowed_images"
        in found[f"{P}.spec.initContainers[0].image"]
    )


def test_the_image_override_is_checked_too() -> None:
    found = problems(restricted_pod(), image="ubuntu", allowed_images=["registry.example.com/*"])
    assert set(found) == {f"{P}.spec.containers[0].image"}


@pytest.mark.parametrize(
    ("image", "allowed"),
    [
        ("registry.example.com/team/a:1", True),
        ("registry.example.com/team/a/b@sha256:ab", True),
        ("registry.example.com/teamx/a:1", False),
        ("registry.example.com.evil.io/team/a:1", False),
        ("REGISTRY.example.com/team/a:1", False),
    ],
)
def test_image_patterns_are_case_sensitive_fnmatch(image: str, allowed: bool) -> None:
    pod = restricted_pod()
    pod["spec"]["containers"][0]["image"] = image
    kwargs = {"macros": MACROS, "allowed_images": ["registry.example.com/team/*"]}
    if allowed:
        render_job(job_for(pod), **kwargs)
    else:
        with pytest.raises(TemplateError):
            render_job(job_for(pod), **kwargs)


def test_an_empty_image_list_allows_nothing() -> None:
    assert problems(restricted_pod(), allowed_images=[])


@pytest.mark.parametrize("argument", ["allowed_images", "allowed_namespaces"])
@pytest.mark.parametrize("value", ["registry/*", 5, [""], [None]])
def test_malformed_allow_lists_are_errors(argument: str, value: Any) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(job_for(restricted_pod()), macros=MACROS, **{argument: value})
    assert info.value.path is not None and info.value.path.startswith(argument)


# --- namespace --------------------------------------------------------------------------------
def test_a_template_namespace_is_refused_by_default() -> None:
    with pytest.raises(TemplateError) as info:
        render_job(job_for(restricted_pod(), namespace="kube-system"), macros=MACROS)
    assert info.value.path == "metadata.namespace"
    assert "template_namespace_allowed=True" in str(info.value)


def test_the_namespace_argument_wins_over_the_template() -> None:
    job = render_job(
        job_for(restricted_pod(), namespace="kube-system"), macros=MACROS, namespace="a"
    )
    assert job["metadata"]["namespace"] == "a"


def test_the_seed_renders_in_its_namespace_when_the_deployment_allows_it() -> None:
    assert (
        render_job(SEED, macros=MACROS, allowed_namespaces=["wandb"])["metadata"]["namespace"]
        == "wandb"
    )
    job = render_job(SEED, macros=MACROS, template_namespace_allowed=True)
    assert job["metadata"]["namespace"] == "wandb"


def test_no_namespace_at_all_is_left_to_the_caller() -> None:
    assert "namespace" not in render_job(job_for(restricted_pod()), macros=MACROS)["metadata"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"namespace": "team-b"}, "'team-b' (from namespace=) is not in allowed_namespaces"),
        ({}, "has no namespace, but allowed_namespaces is set"),
    ],
)
def test_the_final_namespace_must_be_allowed(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(job_for(restricted_pod()), macros=MACROS, allowed_namespaces=["a"], **kwargs)
    assert info.value.path == "metadata.namespace"
    assert message in str(info.value)


def test_a_template_namespace_outside_the_list_is_refused_even_when_trusted() -> None:
    with pytest.raises(TemplateError, match="from the template"):
        render_job(
            job_for(restricted_pod(), namespace="b"),
            macros=MACROS,
            allowed_namespaces=["a"],
            template_namespace_allowed=True,
        )


# --- service accounts --------------------------------------------------------------------------
def _with_account(field: str = "serviceAccountName", name: str = "admin") -> dict[str, Any]:
    pod = restricted_pod()
    pod["spec"][field] = name
    return pod


@pytest.mark.parametrize("field", ["serviceAccountName", "serviceAccount"])
def test_a_template_may_not_choose_a_service_account_by_default(field: str) -> None:
    found = problems(_with_account(field))
    assert set(found) == {f"{P}.spec.{field}"}
    assert "'admin' is not allowed; allowed: none" in found[f"{P}.spec.{field}"]


def test_allowed_service_accounts_are_accepted() -> None:
    render_job(job_for(_with_account()), macros=MACROS, allowed_service_accounts={"admin", "x"})
    assert problems(_with_account(name="other"), allowed_service_accounts=["admin"])


def test_service_account_sets_every_pod_and_wins() -> None:
    template = job_for(_with_account("serviceAccount"))
    template["spec"]["tasks"].append(copy.deepcopy(template["spec"]["tasks"][0]) | {"name": "b"})
    job = render_job(template, macros=MACROS, service_account="trainer")
    for task in job["spec"]["tasks"]:
        spec = task["template"]["spec"]
        assert spec["serviceAccountName"] == "trainer" and "serviceAccount" not in spec


def test_service_account_must_be_on_the_allow_list() -> None:
    with pytest.raises(TemplateError) as info:
        render_job(
            job_for(restricted_pod()),
            macros=MACROS,
            service_account="trainer",
            allowed_service_accounts=["runner"],
        )
    assert info.value.path == "service_account"


@pytest.mark.parametrize("name", ["", "Bad Name", 5])
def test_service_account_must_be_a_valid_name(name: Any) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(job_for(restricted_pod()), macros=MACROS, service_account=name)
    assert info.value.path == "service_account"


def test_security_problems_of_all_kinds_come_in_one_error() -> None:
    pod = _with_account()
    pod["spec"]["hostPID"] = True
    found = problems(pod, image="evil:1", allowed_images=["good/*"], allowed_namespaces=["a"])
    assert set(found) == {
        f"{P}.spec.hostPID",
        f"{P}.spec.containers[0].image",
        "metadata.namespace",
        f"{P}.spec.serviceAccountName",
    }

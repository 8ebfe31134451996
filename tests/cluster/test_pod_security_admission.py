"""The renderer's pod security checks agree with the real API server's PodSecurity admission.

Two namespaces enforce ``baseline`` and ``restricted``; every pod of the corpus is created in
each with a server-side dry run (nothing is stored or run), and the API server's verdict must
be the renderer's: refused by one exactly when refused by the other.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from airflow_volcano_wandb.template import TemplateError, render_job
from airflow_volcano_wandb.testing.pytest_plugin import VolcanoCluster
from test_support.pod_security_corpus import CASES, Case
from test_support.template_cases import MACROS

pytestmark = pytest.mark.cluster

LEVELS = ("baseline", "restricted")


@pytest.fixture(scope="module")
def enforcing(volcano_cluster: VolcanoCluster) -> Iterator[dict[str, str]]:
    """Level -> a fresh namespace that enforces it."""
    namespaces = {level: volcano_cluster.create_namespace(f"pss-{level}") for level in LEVELS}
    with volcano_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        for level, name in namespaces.items():
            label = {"pod-security.kubernetes.io/enforce": level}
            core.patch_namespace(name, {"metadata": {"labels": label}})
    try:
        yield namespaces
    finally:
        for name in namespaces.values():
            volcano_cluster.delete_namespace(name)


@pytest.fixture(scope="module")
def core(volcano_cluster: VolcanoCluster) -> Iterator[client.CoreV1Api]:
    with volcano_cluster.api_client() as api:
        yield client.CoreV1Api(api)


def server_refuses(core: client.CoreV1Api, namespace: str, case: Case) -> bool:
    pod = case.pod()
    body = {"apiVersion": "v1", "kind": "Pod", **pod}
    body["metadata"] = {**pod["metadata"], "name": case.name}
    try:
        core.create_namespaced_pod(namespace, body, dry_run="All")
    except ApiException as err:
        # 403 "violates PodSecurity" is the verdict; anything else (e.g. 422 Invalid) means
        # the corpus pod is broken in a way that has nothing to do with pod security.
        assert err.status == 403 and "violates PodSecurity" in str(err.body), err.body
        return True
    return False


def renderer_refuses(case: Case, level: str) -> bool:
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "job"},
        "spec": {"tasks": [{"name": "main", "replicas": 1, "template": case.pod()}]},
    }
    try:
        render_job(job, macros=MACROS, pod_security=level)
    except TemplateError:
        return True
    return False


def test_admission_is_enforcing(core: client.CoreV1Api, enforcing: dict[str, str]) -> None:
    """The comparison means something only if the plugin is on: a host-network pod is refused."""
    probe = Case("probe", "privileged", lambda pod: pod["spec"].update(hostNetwork=True))
    assert server_refuses(core, enforcing["baseline"], probe)
    assert not server_refuses(
        core, enforcing["restricted"], Case("ok", "restricted", lambda p: None)
    )


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_renderer_refuses_exactly_what_admission_refuses(
    core: client.CoreV1Api, enforcing: dict[str, str], case: Case, level: str
) -> None:
    assert renderer_refuses(case, level) == server_refuses(core, enforcing[level], case)

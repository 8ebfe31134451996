"""The chart's identities in pods of the Airflow image, on the real node, with ``in_cluster``.

``doctor`` (what docs/helm.md asks users to run in a worker pod and in the triggerer pod) runs in
a pod as ``airflow-worker`` and in one as ``airflow-triggerer``, each bound only by
``docker/k8s/rbac-helm-binding.example.yaml`` (rbac.yaml's Role in the jobs' namespace), with
``kubernetes_default`` set to ``in_cluster: true`` as docs/helm.md's ``values.yaml`` sets it: the
token each reads is its pod's projected ServiceAccount token, reached through the ``kubernetes``
Service. Each must say who it is and that every permission of the Role is granted; the
apiserver's audit log must hold no Forbidden of either identity (named by verb and resource).

Not tried here: the KubernetesExecutor itself (a scheduler starting task pods); see
docs/helm.md's in-cluster section.
"""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from test_support.real_pods import pod_log
from tests.realpods import in_cluster_identity as chart

pytestmark = [pytest.mark.cluster, pytest.mark.real_pods, pytest.mark.timeout(600)]


def test_doctor_in_worker_and_triggerer_pods_finds_the_helm_binding_complete_in_cluster(
    volcano_cluster, volcano_namespace, real_node
):
    jobs_ns = volcano_namespace
    airflow_ns = volcano_cluster.create_namespace("airflow")
    logs, phases = {}, {}
    with volcano_cluster.api_client() as api:
        core = k8s.CoreV1Api(api)
        try:
            image = chart.load_airflow_image(volcano_cluster.state_dir)
            accounts = chart.bind_like_the_chart(api, jobs_ns, airflow_ns)
            pods = {
                a: a.replace("airflow-", "doctor-") for a in accounts if a != "airflow-scheduler"
            }
            assert set(pods) == {"airflow-worker", "airflow-triggerer"}, accounts
            env = {"AIRFLOW_CONN_KUBERNETES_DEFAULT": chart.in_cluster_conn(jobs_ns)}
            doctor = ["python3", "-m", "airflow_volcano_wandb", "doctor", "--namespace", jobs_ns]
            for account, pod in pods.items():
                manifest = chart.airflow_pod(pod, account, image, doctor, env, 3607)
                core.create_namespaced_pod(airflow_ns, manifest)
            for account, pod in pods.items():
                phases[account] = chart.wait_for_pod_end(core, airflow_ns, pod, 420)
                logs[account] = pod_log(core, airflow_ns, pod)
        finally:
            volcano_cluster.delete_namespace(airflow_ns)
    for account, log in logs.items():
        assert phases[account] == "Succeeded", log[-3000:]
        assert f"identity: service account '{account}' of namespace '{airflow_ns}'" in log, log
        assert f"RBAC in namespace '{jobs_ns}': all 12 permissions of rbac.yaml granted" in log
        assert "doctor: all checks passed" in log
    if volcano_cluster.audit_log is not None:
        user = f"system:serviceaccount:{airflow_ns}:"
        refused = chart.refused(volcano_cluster.audit_log, user, set())
        # doctor's optional reads (the namespace, webhooks, Volcano's Deployments, queues) are
        # refused and reported as expected for the least-privilege Role: only the resources the
        # Role grants count here.
        granted = (" jobs/", " podgroups/", " pods/", " pods/log", " events/", " secrets/")
        in_role = [r for r in refused if any(g in r for g in granted)]
        assert not in_role, "\n".join(in_role)

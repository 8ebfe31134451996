"""A triggerer's wait on a ServiceAccount token that expires, in a pod on the real node.

The provider's ``VolcanoJobTrigger`` runs in a pod of the Airflow image built here
(``tests/realpods/trigger_probe.py``), as ``airflow-triggerer`` bound exactly as
``docker/k8s/rbac-helm-binding.example.yaml`` binds it, with ``kubernetes_default`` set to
``in_cluster: true`` (docs/helm.md). The pod's projected token lives 10 minutes
(``expirationSeconds: 600``) and the apiserver does not extend it
(``--service-account-extend-token-expiration=false``, ``testing/cluster/in_cluster.py``), so the
kubelet writes a new token every 8 minutes. The job waited on runs 26 minutes (a simulated
job: what is tried is the trigger's side, its watches and reads through the ``kubernetes``
Service). It must end ``succeeded``; no request of the pod may be refused (401 or 403, from the
apiserver's audit log); the watches must have carried at least three tokens, the last after
the first had expired.

Marked ``long`` and ``real_pods``: it runs only when ``-m "long and real_pods"`` names both, on
a cluster with the real node and the audit log (``make test-token-rotation``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.job.ownership import MANAGED_BY, MANAGED_BY_LABEL
from test_support.cluster_jobs import submit_job
from test_support.real_pods import pod_log
from tests.realpods import in_cluster_identity as chart

#: How long the job waited on runs; 1560 s spans three rotations of a 600 s token.
SECONDS = int(os.environ.get("AVW_TOKEN_TRIAL_SECONDS", "1560"))
TOKEN_SECONDS = 600

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.real_pods,
    pytest.mark.long,
    pytest.mark.timeout(SECONDS + 600),
]


def test_a_deferred_wait_in_a_pod_outlives_two_token_rotations_in_cluster(
    volcano_cluster, volcano_namespace, real_node
):
    assert volcano_cluster.audit_log is not None, "start the cluster with AVW_CLUSTER_AUDIT_LOG=1"
    jobs_ns = volcano_namespace
    airflow_ns = volcano_cluster.create_namespace("airflow")
    with volcano_cluster.api_client() as api:
        core = k8s.CoreV1Api(api)
        try:
            image = chart.load_airflow_image(volcano_cluster.state_dir)
            accounts = chart.bind_like_the_chart(api, jobs_ns, airflow_ns)
            assert "airflow-triggerer" in accounts
            probe = Path(__file__).with_name("trigger_probe.py").read_text()
            core.create_namespaced_config_map(
                airflow_ns, {"metadata": {"name": "probe"}, "data": {"trigger_probe.py": probe}}
            )
            job = submit_job(
                api, jobs_ns, "rotating", SECONDS, labels={MANAGED_BY_LABEL: MANAGED_BY}
            )
            env = {
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": chart.in_cluster_conn(jobs_ns),
                "PROBE_JOB": "rotating",
                "PROBE_NAMESPACE": jobs_ns,
                "PROBE_UID": job["metadata"]["uid"],
            }
            pod = chart.airflow_pod(
                "triggerer",
                "airflow-triggerer",
                image,
                ["python3", "/probe/trigger_probe.py"],
                env,
                TOKEN_SECONDS,
                config_map="probe",
            )
            core.create_namespaced_pod(airflow_ns, pod)
            started = time.monotonic()
            phase = chart.wait_for_pod_end(core, airflow_ns, "triggerer", SECONDS + 420)
            took = time.monotonic() - started
            log = pod_log(core, airflow_ns, "triggerer")
            ended = core.read_namespaced_pod("triggerer", airflow_ns)
        finally:
            volcano_cluster.delete_namespace(airflow_ns)
    print(f"triggerer pod ended {phase} after {took:.0f}s; its log's last lines:\n{log[-2000:]}")
    facts = chart.probe_facts(ended)
    print("facts:", *facts, sep="\n  ")
    assert phase == "Succeeded", log[-3000:]

    (event,) = [f["event"] for f in facts if "event" in f]
    assert event["outcome"] == "succeeded", event
    failures = [f["failure"] for f in facts if "failure" in f]
    assert not failures, failures

    tokens = [f for f in facts if "iat" in f]
    assert len(tokens) >= 3, tokens  # the first and two rotations
    assert all(t["exp"] - t["iat"] == TOKEN_SECONDS for t in tokens), tokens  # not extended

    user = f"system:serviceaccount:{airflow_ns}:"
    refused = chart.refused(volcano_cluster.audit_log, user, {ended.status.pod_ip})
    assert not refused, "\n".join(refused)
    watches = [
        e
        for e in chart.audit_events(volcano_cluster.audit_log, user + "airflow-triggerer")
        if e["verb"] == "watch"
    ]
    carried = [chart.credential_id(e) for e in watches]
    assert len(set(carried)) >= 3, carried  # the watches resumed with each new token
    first_expired = tokens[0]["exp"]
    late = [e for e in watches if _at(e) > first_expired]
    assert late and all(chart.credential_id(e) != carried[0] for e in late), carried


def _at(event: dict) -> float:
    from datetime import datetime

    return datetime.fromisoformat(event["requestReceivedTimestamp"]).timestamp()

"""Every `kubectl ... -l` selector the docs print finds the pods of a job the operator
submitted, on the local cluster: pods say whose they are (issue #33)."""

from __future__ import annotations

import re
from pathlib import Path

from airflow_volcano_wandb.job.ownership import IDENTITY_LABEL
from test_support.cluster_jobs import SIM_DURATION, list_jobs, run_dag, seed_template, wait_until

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# `kubectl get pods ... -l SELECTOR` in backticks; the selector runs to the next space or `.
SELECTOR = re.compile(r"`kubectl get pods[^`]*?-l[ =]([^ `]+)[^`]*`")


def documented_selectors() -> list[tuple[str, str]]:
    return [
        (f"{path.name}: {match.group(0)}", match.group(1))
        for path in DOCS
        for match in SELECTOR.finditer(path.read_text())
    ]


def test_the_docs_print_selectors_for_the_provider_and_for_one_task():
    printed = [selector for _, selector in documented_selectors()]
    assert "app.kubernetes.io/managed-by=airflow-volcano-wandb" in printed
    assert any("<task_id>" in selector for selector in printed)


def test_every_selector_the_docs_print_finds_the_jobs_pods(cluster):
    api, namespace = cluster
    # Submitted and not waited for: the master runs long, so the pods are there to be found.
    template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    _, tis = run_dag(
        "avw_test_submit_only", template=template, namespace=namespace, replicas={"worker": "2"}
    )
    assert tis["train"][0] == "success"
    (job,) = list_jobs(api, namespace)
    core = cluster_core(api)
    pods = wait_until(
        lambda: (found := core.list_namespaced_pod(namespace).items) and len(found) == 3 and found,
        60,
        what="the job's 3 pods",
    )
    labels = pods[0].metadata.labels
    values = {
        "<namespace>": namespace,
        "<dag_id>": "avw_test_submit_only",
        "<task_id>": "train",
        "<try>": "1",
        "<digest>": job["metadata"]["labels"][IDENTITY_LABEL],
    }
    assert labels["airflow-volcano-wandb.io/try-number"] == "1"
    for where, selector in documented_selectors():
        for placeholder, value in values.items():
            selector = selector.replace(placeholder, value)
        found = core.list_namespaced_pod(namespace, label_selector=selector).items
        assert sorted(p.metadata.name for p in found) == sorted(p.metadata.name for p in pods), (
            where
        )


def cluster_core(api):
    from kubernetes import client

    return client.CoreV1Api(api)

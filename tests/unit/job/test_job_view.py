"""The typed view of a Volcano Job: read once, tolerant of what the API leaves out."""

from __future__ import annotations

from airflow_volcano_wandb.job import fit, gpu_usage
from airflow_volcano_wandb.job.job_facts import JobFacts
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.job.job_view import JobView, ObjectMeta, task_replicas
from airflow_volcano_wandb.wait import diagnostics

CONTAINER = {"name": "c", "image": "img:1", "resources": {"requests": {"cpu": "1"}}}


def _job_with_a_task_without_replicas() -> dict:
    """As Volcano 1.14 answers a job created with a task that has no ``replicas``: the field
    stays absent (``omitempty``), and Volcano starts no pod for that task."""
    return {
        "metadata": {"name": "j", "namespace": "ns", "uid": "u-1"},
        "spec": {
            "minAvailable": 1,
            "tasks": [
                {
                    "name": "master",
                    "replicas": 1,
                    "template": {"spec": {"containers": [CONTAINER]}},
                },
                {"name": "worker", "template": {"spec": {"containers": [CONTAINER]}}},
            ],
        },
    }


def test_a_task_without_replicas_has_none() -> None:
    job = _job_with_a_task_without_replicas()
    assert task_replicas(job["spec"]["tasks"][1]) == 0
    assert JobView.of(job).replicas == {"master": 1, "worker": 0}
    assert JobView.of(job).pod_names() == ["j-master-0"]


def test_every_reader_agrees_a_task_without_replicas_has_no_pod() -> None:
    """The wait, the asset event, the fit check, the GPU bill and the diagnostics read the
    same job alike: none of them counts a pod for the worker."""
    job = _job_with_a_task_without_replicas()
    assert interpret(job).replicas == {"master": 1, "worker": 0}
    assert JobFacts.from_job(job).replicas == {"master": 1, "worker": 0}
    assert JobFacts.from_job(job).processes == {"master": 1, "worker": 0}
    assert [(t.name, t.pods) for t in fit.gang(job)] == [("master", 1)]
    assert gpu_usage.removed_ranks(job, []) == {"master-0": 0}
    assert diagnostics.pod_names(job) == {"j-master-0"}


def test_the_view_reads_metadata_status_and_spec_once() -> None:
    job = {
        "metadata": {
            "name": "j",
            "namespace": "ns",
            "uid": "u-1",
            "resourceVersion": "42",
            "labels": {"a": "1"},
            "annotations": {"b": "2"},
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "deletionTimestamp": "2026-01-01T00:01:00Z",
            "ownerReferences": [{"uid": "owner"}, {"kind": "NoUid"}],
        },
        "spec": {"minAvailable": 3, "tasks": [{"name": "master", "replicas": 1}]},
        "status": {
            "state": {"phase": "Running", "reason": "r", "message": "m"},
            "retryCount": 2,
            "conditions": [{"status": "Pending"}, None, {"status": "Running"}],
            "taskStatusCount": {"master": {"phase": {"Running": 1}}},
        },
    }
    view = JobView.of(job)
    assert (view.name, view.namespace, view.uid, view.resource_version) == ("j", "ns", "u-1", "42")
    assert (view.labels, view.annotations) == ({"a": "1"}, {"b": "2"})
    assert view.deletion_timestamp == "2026-01-01T00:01:00Z"
    assert view.meta.owner_uids == frozenset({"owner"})
    assert (view.phase, view.reason, view.message, view.retry_count) == ("Running", "r", "m", 2)
    assert view.min_available == 3
    assert [c.get("status") for c in view.conditions] == ["Pending", None, "Running"]
    assert view.pods_by_task == {"master": {"Running": 1}}
    assert view.raw is job


def test_missing_or_null_fields_read_as_empty() -> None:
    for job in (None, {}, {"metadata": None, "spec": None, "status": None}, {"metadata": {}}):
        view = JobView.of(job)
        assert (view.name, view.uid, view.phase, view.retry_count) == ("", "", "", 0)
        assert (view.replicas, view.conditions, dict(view.labels)) == ({}, (), {})
        assert view.deletion_timestamp is None
    assert ObjectMeta.of({"metadata": {"annotations": None}}).annotation("x") is None
    assert ObjectMeta.of({"metadata": {"annotations": {"x": 7}}}).annotation("x") == "7"

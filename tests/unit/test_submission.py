"""The submit/reattach rule for a job already carrying this task instance's identity (pure)."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from airflow_volcano_wandb.hooks.kubernetes_api import KubernetesPermissionError
from airflow_volcano_wandb.job.ownership import REPORTED_ANNOTATION
from airflow_volcano_wandb.job.submission import Decision, decide, refused_outright


def job(phase: str, deleting: bool = False) -> dict:
    meta = {"name": "j", "namespace": "ns", "uid": "u"}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    return {"metadata": meta, "status": {"state": {"phase": phase}}}


@pytest.mark.parametrize(
    ("phase", "deleting", "reattach", "decision"),
    [
        ("Running", False, True, Decision.REUSE),
        ("Pending", False, True, Decision.REUSE),
        ("Running", False, False, Decision.REPLACE),
        ("Completed", False, False, Decision.REUSE),
        ("Failed", False, True, Decision.REPLACE),
        ("Aborted", False, True, Decision.REPLACE),
        ("Terminated", False, True, Decision.REPLACE),
        ("Running", True, True, Decision.WAIT_GONE),
        ("Completed", True, True, Decision.WAIT_GONE),
    ],
)
def test_decide(phase, deleting, reattach, decision):
    assert decide(job(phase, deleting), reattach=reattach) is decision


@pytest.mark.parametrize(
    ("exc", "refused"),
    [
        (ApiException(status=400), True),
        (ApiException(status=422), True),
        (KubernetesPermissionError("no"), True),
        (ApiException(status=409), False),  # exists: reattach
        (ApiException(status=429), False),  # may have been applied
        (ApiException(status=503), False),
        (TimeoutError(), False),
    ],
)
def test_refused_outright_only_when_no_job_can_exist(exc, refused):
    assert refused_outright(exc) is refused


def test_a_reported_job_is_a_past_result_whatever_its_phase():
    for phase in ("Completed", "Failed", "Running"):
        reported = job(phase)
        reported["metadata"]["annotations"] = {REPORTED_ANNOTATION: "1"}
        assert decide(reported, reattach=True) is Decision.PAST


class BrokenStore:
    """A task state store whose supervisor channel fails (the store is only an optimisation)."""

    def get(self, key, default=None):
        raise RuntimeError("supervisor gone")

    def set(self, key, value):
        raise RuntimeError("supervisor gone")


class DictStore(dict):
    def set(self, key, value):
        self[key] = value


def test_the_task_state_store_remembers_exactly_the_job_reference():
    from airflow_volcano_wandb.job.submission import STATE_STORE_KEY, recall, remember

    store = DictStore()
    assert recall(store) is None
    remember(store, {"name": "j", "namespace": "ns", "uid": "u", "extra": "dropped"})
    assert store[STATE_STORE_KEY] == {"name": "j", "namespace": "ns", "uid": "u"}
    assert recall(store) == {"name": "j", "namespace": "ns", "uid": "u"}
    assert recall(None) is None  # no store (Airflow < 3.3, dag.test without one)
    store[STATE_STORE_KEY] = {"name": "j", "namespace": "ns"}  # no uid: never trusted
    assert recall(store) is None


def test_a_failing_task_state_store_falls_back_to_the_labels(caplog):
    from airflow_volcano_wandb.job.submission import recall, remember

    assert recall(BrokenStore()) is None
    remember(BrokenStore(), {"name": "j", "namespace": "ns", "uid": "u"})  # does not raise
    assert "searching by labels" in caplog.text and "labels still find the job" in caplog.text

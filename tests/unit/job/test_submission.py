"""Submission's edges that need no cluster: which API errors mean no job was made, and the
task state store (the plan itself: test_submission_plan.py)."""

from __future__ import annotations

import pytest
from kubernetes.client.rest import ApiException

from airflow_volcano_wandb.hooks.kubernetes_api import KubernetesPermissionError
from airflow_volcano_wandb.job.submission import refused_outright


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

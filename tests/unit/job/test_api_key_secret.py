"""api_key_secret against a scripted Secret store that can only create (as the Role allows):
the Secret a job names is created after the job, owned by it from creation, immutable; a 409
withdraws a new job and is an earlier try's delivery for a reattached one."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from urllib3.exceptions import MaxRetryError

from airflow_volcano_wandb.hooks.kubernetes_api import (
    KubernetesPermissionError,
    SecretExistsError,
)
from airflow_volcano_wandb.job.api_key_secret import (
    NAME_PREFIX,
    KeyNotDeliveredError,
    deliver,
    fresh_ref,
    named_by,
)
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.wandb.wandb_env import container_env
from airflow_volcano_wandb.wandb.wandb_run import SecretKeyRef, WandbRunSpec

IDENTITY = TaskInstanceIdentity("dag", "train", "run-1")
LOG = logging.getLogger(__name__)


def _job(secret: SecretKeyRef | None, uid: str = "uid-new") -> dict[str, Any]:
    """A job as the operator renders it: every container's env from ``wandb_env``."""
    spec = WandbRunSpec(run_id="r1", api_key_secret=secret)
    tasks = [
        {
            "name": name,
            "template": {
                "spec": {
                    "containers": [{"name": "c", "env": container_env(spec, is_master_task=master)}]
                }
            },
        }
        for name, master in (("master", True), ("worker", False))
    ]
    return {
        "metadata": {"name": "wandb-job-b", "namespace": "ns", "uid": uid},
        "spec": {"tasks": tasks},
    }


class CreateOnly:
    """One namespace's Secrets through the only verb the provider's Role grants."""

    def __init__(self, taken: Exception | None = None) -> None:
        self.created: list[dict[str, Any]] = []
        self.taken = taken

    def create_secret(self, body: dict, namespace: str) -> dict:
        if self.taken is not None:
            raise self.taken
        self.created.append(body)
        return body["metadata"]


class Withdrawals:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


def _deliver(store: CreateOnly, job: dict, *, created: bool) -> Withdrawals:
    withdraw = Withdrawals()
    deliver(store, IDENTITY, job, "the-key", created=created, withdraw=withdraw, task_log=LOG)
    return withdraw


def test_each_render_names_a_secret_nobody_can_predict() -> None:
    names = {fresh_ref().name for _ in range(100)}
    assert len(names) == 100
    assert all(n.startswith(NAME_PREFIX) and len(n) == len(NAME_PREFIX) + 32 for n in names)
    assert all(fresh_ref().key == "api-key" for _ in range(3))


def test_the_secret_is_read_from_the_jobs_own_spec() -> None:
    ref = fresh_ref()
    assert named_by(_job(ref)) == ref
    assert named_by(_job(None)) is None  # no key at all
    # A Secret the DAG brought (wandb_api_key_secret) is not the provider's to create.
    assert named_by(_job(SecretKeyRef("team-a-wandb", "api-key"))) is None


def test_a_new_jobs_secret_is_created_owned_by_it_and_immutable() -> None:
    ref, store = fresh_ref(), CreateOnly()
    withdraw = _deliver(store, _job(ref), created=True)
    [body] = store.created
    assert body["metadata"]["name"] == ref.name
    assert [o["uid"] for o in body["metadata"]["ownerReferences"]] == ["uid-new"]
    assert body["metadata"]["ownerReferences"][0]["kind"] == "Job"
    assert body["immutable"] is True
    assert body["stringData"] == {"api-key": "the-key"}
    assert IDENTITY.owns(body)
    assert withdraw.count == 0


def test_a_reattached_job_whose_secret_was_never_created_gets_it() -> None:
    # Its submitter died between the job and the Secret: the next try delivers.
    store = CreateOnly()
    withdraw = _deliver(store, _job(fresh_ref(), uid="uid-old"), created=False)
    assert [b["metadata"]["ownerReferences"][0]["uid"] for b in store.created] == ["uid-old"]
    assert withdraw.count == 0


def test_a_reattached_jobs_secret_already_there_was_delivered_by_its_try() -> None:
    store = CreateOnly(taken=SecretExistsError("x"))
    withdraw = _deliver(store, _job(fresh_ref()), created=False)
    assert withdraw.count == 0


def test_a_new_jobs_name_taken_by_someone_else_withdraws_the_job() -> None:
    ref = fresh_ref()
    store = CreateOnly(taken=SecretExistsError(ref.name))
    withdraw = Withdrawals()
    with pytest.raises(KeyNotDeliveredError, match=f"ns/{ref.name}.*withdrawn"):
        deliver(store, IDENTITY, _job(ref), "k", created=True, withdraw=withdraw, task_log=LOG)
    assert withdraw.count == 1


def test_a_new_jobs_409_after_a_lost_answer_is_its_own_create() -> None:
    # The first attempt was applied, its answer lost; the retry meets what it made.
    store = CreateOnly(taken=SecretExistsError("x", maybe_ours=True))
    assert _deliver(store, _job(fresh_ref()), created=True).count == 0


def test_a_new_job_whose_secret_is_refused_is_withdrawn() -> None:
    store = CreateOnly(taken=KubernetesPermissionError("denied 'create' on 'secrets'"))
    withdraw = Withdrawals()
    with pytest.raises(KeyNotDeliveredError, match="denied"):
        deliver(
            store, IDENTITY, _job(fresh_ref()), "k", created=True, withdraw=withdraw, task_log=LOG
        )
    assert withdraw.count == 1


def test_an_api_out_of_reach_leaves_the_job_for_the_next_try() -> None:
    store = CreateOnly(taken=MaxRetryError(None, "/api/v1/namespaces/ns/secrets"))
    withdraw = Withdrawals()
    with pytest.raises(MaxRetryError):
        deliver(
            store, IDENTITY, _job(fresh_ref()), "k", created=True, withdraw=withdraw, task_log=LOG
        )
    assert withdraw.count == 0


def test_a_job_without_a_key_secret_of_ours_gets_none() -> None:
    store = CreateOnly()
    _deliver(store, _job(SecretKeyRef("team-a-wandb", "api-key")), created=True)
    _deliver(store, _job(None), created=False)
    assert store.created == []

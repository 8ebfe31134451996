"""api_key_secret against a scripted Secret store: an earlier try's Secret may be
garbage-collected with its deleted job at any moment, also between our read and patch; the
Secret is written before a job is created (``prepare``) and owned by it after."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.hooks.kubernetes_api import SecretExistsError
from airflow_volcano_wandb.job.api_key_secret import (
    STORE_ATTEMPTS,
    SecretOwnedElsewhereError,
    abandon,
    prepare,
    secret_body,
    store_for_job,
)
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity

IDENTITY = TaskInstanceIdentity("dag", "train", "run-1")
OLD_JOB = {"metadata": {"name": "wandb-job-a", "namespace": "ns", "uid": "uid-old"}}
NEW_JOB = {"metadata": {"name": "wandb-job-b", "namespace": "ns", "uid": "uid-new"}}


class SecretStore:
    """One namespace's Secrets; ``collect_before`` deletes the Secret just before that call
    (``"get"`` or ``"patch"``) the given number of times, as the garbage collector may."""

    def __init__(
        self,
        existing: dict[str, Any] | None,
        collect_before: str = "",
        times: int = 1,
        jobs: tuple[dict, ...] = (),
    ):
        self.secrets = {} if existing is None else {existing["metadata"]["name"]: existing}
        self.collect_before, self.times = collect_before, times
        self.jobs = {j["metadata"]["name"]: j for j in jobs}  # the live jobs
        self.calls: list[str] = []

    def get_job(self, name: str, namespace: str) -> dict | None:
        self.calls.append("get_job")
        return self.jobs.get(name)

    def _maybe_collect(self, call: str) -> None:
        if call == self.collect_before and self.times > 0:
            self.times -= 1
            self.secrets.clear()

    def create_secret(self, body: dict, namespace: str) -> dict:
        self.calls.append("create")
        name = body["metadata"]["name"]
        if name in self.secrets:
            raise SecretExistsError(name)
        self.secrets[name] = body
        return body["metadata"]

    def get_secret_metadata(self, name: str, namespace: str) -> dict | None:
        self.calls.append("get")
        self._maybe_collect("get")
        secret = self.secrets.get(name)
        return None if secret is None else secret["metadata"]

    def patch_secret(self, name: str, namespace: str, patch: dict) -> dict | None:
        self.calls.append("patch")
        self._maybe_collect("patch")
        if name not in self.secrets:
            return None
        secret = self.secrets[name]
        if "ownerReferences" in patch.get("metadata", {}):  # a strategic merge by uid
            owners = {r["uid"]: r for r in secret["metadata"]["ownerReferences"]}
            owners.update({r["uid"]: r for r in patch["metadata"]["ownerReferences"]})
            secret["metadata"]["ownerReferences"] = list(owners.values())
        secret["stringData"] = patch.get("stringData", secret["stringData"])
        return secret["metadata"]


def _owner_uids(store: SecretStore) -> list[list[str]]:
    return [[r["uid"] for r in s["metadata"]["ownerReferences"]] for s in store.secrets.values()]


def test_an_earlier_tries_secret_gets_the_new_key_and_the_new_owner() -> None:
    store = SecretStore(secret_body(IDENTITY, OLD_JOB, "old-key"))
    store_for_job(store, IDENTITY, NEW_JOB, "new-key")
    assert store.calls == ["create", "get", "patch"]
    assert _owner_uids(store) == [["uid-old", "uid-new"]]
    assert [s["stringData"] for s in store.secrets.values()] == [{"api-key": "new-key"}]


@pytest.mark.parametrize("collected_before", ["get", "patch"])
def test_a_secret_collected_under_us_is_created_again(collected_before: str) -> None:
    store = SecretStore(secret_body(IDENTITY, OLD_JOB, "old-key"), collected_before)
    store_for_job(store, IDENTITY, NEW_JOB, "new-key")
    assert store.calls[-1] == "create"
    assert _owner_uids(store) == [["uid-new"]]  # owned by the new job alone
    assert [s["stringData"] for s in store.secrets.values()] == [{"api-key": "new-key"}]


def test_a_secret_that_keeps_vanishing_is_an_error_not_a_loop() -> None:
    store = SecretStore(secret_body(IDENTITY, OLD_JOB, "k"), "patch", times=STORE_ATTEMPTS)
    store.create_secret = _always_taken(store)  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="kept being deleted"):
        store_for_job(store, IDENTITY, NEW_JOB, "new-key")
    assert store.calls.count("patch") == STORE_ATTEMPTS


def _always_taken(store: SecretStore):
    def create_secret(body: dict, namespace: str) -> dict:
        store.calls.append("create")
        store.secrets[body["metadata"]["name"]] = secret_body(IDENTITY, OLD_JOB, "k")
        raise SecretExistsError(body["metadata"]["name"])

    return create_secret


def test_someone_elses_secret_is_never_touched() -> None:
    other = secret_body(IDENTITY, OLD_JOB, "their-key")  # our Secret's name, their labels
    other["metadata"]["labels"] = TaskInstanceIdentity("other", "t", "r").labels()
    store = SecretStore(other)
    with pytest.raises(SecretOwnedElsewhereError):
        store_for_job(store, IDENTITY, NEW_JOB, "new-key")
    assert "patch" not in store.calls
    assert [s["stringData"] for s in store.secrets.values()] == [{"api-key": "their-key"}]


def test_before_a_job_the_secret_is_written_without_an_owner() -> None:
    store = SecretStore(None)
    prepare(store, IDENTITY, "ns", "key")
    assert store.calls == ["create"]
    assert _owner_uids(store) == [[]]
    store_for_job(store, IDENTITY, NEW_JOB, "key")  # the job, once created, becomes its owner
    assert _owner_uids(store) == [["uid-new"]]


def test_a_secret_a_live_job_owns_gets_the_new_key_and_keeps_its_owner() -> None:
    store = SecretStore(secret_body(IDENTITY, OLD_JOB, "old-key"), jobs=(OLD_JOB,))
    prepare(store, IDENTITY, "ns", "new-key")
    assert store.calls == ["create", "get", "get_job", "patch"]
    assert _owner_uids(store) == [["uid-old"]]
    assert [s["stringData"] for s in store.secrets.values()] == [{"api-key": "new-key"}]


def test_a_secret_whose_owners_are_gone_is_waited_out_and_created_afresh() -> None:
    # The earlier job was just deleted: the collector takes its Secret, whatever is written
    # into it meanwhile. Patching it would leave the new job without its key.
    store = SecretStore(secret_body(IDENTITY, OLD_JOB, "old-key"))  # OLD_JOB is gone
    gets = {"n": 0}
    real_get = store.get_secret_metadata

    def get_then_collected(name: str, namespace: str) -> dict | None:
        gets["n"] += 1
        if gets["n"] == 2:  # the collector gets there while we wait
            store.secrets.clear()
        return real_get(name, namespace)

    store.get_secret_metadata = get_then_collected  # type: ignore[method-assign]
    prepare(store, IDENTITY, "ns", "new-key")
    assert "patch" not in store.calls and store.calls[-1] == "create"
    assert _owner_uids(store) == [[]]
    assert [s["stringData"] for s in store.secrets.values()] == [{"api-key": "new-key"}]


def test_someone_elses_secret_refuses_the_submission_before_any_job() -> None:
    other = secret_body(IDENTITY, OLD_JOB, "their-key")
    other["metadata"]["labels"] = TaskInstanceIdentity("other", "t", "r").labels()
    store = SecretStore(other)
    with pytest.raises(SecretOwnedElsewhereError):
        prepare(store, IDENTITY, "ns", "new-key")
    assert "patch" not in store.calls


def test_a_refused_jobs_secret_gets_an_owner_that_does_not_exist() -> None:
    # The provider may not delete Secrets: the garbage collector deletes a dependent whose
    # owners are all absent (proven on the cluster by the refused-job test).
    store = SecretStore(None)
    prepare(store, IDENTITY, "ns", "key")
    abandon(store, IDENTITY, "ns")
    ((owner,),) = [s["metadata"]["ownerReferences"] for s in store.secrets.values()]
    assert owner["kind"] == "Job"
    assert owner["uid"] not in {"uid-old", "uid-new"}

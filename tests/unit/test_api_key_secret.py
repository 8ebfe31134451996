"""api_key_secret.store_for_job against a scripted Secret store: an earlier try's Secret may
be garbage-collected with its deleted job at any moment, also between our read and patch."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.api_key_secret import (
    STORE_ATTEMPTS,
    SecretOwnedElsewhereError,
    secret_body,
    store_for_job,
)
from airflow_volcano_wandb.hooks.kubernetes_api import SecretExistsError
from airflow_volcano_wandb.ownership import TaskInstanceIdentity

IDENTITY = TaskInstanceIdentity("dag", "train", "run-1")
OLD_JOB = {"metadata": {"name": "wandb-job-a", "namespace": "ns", "uid": "uid-old"}}
NEW_JOB = {"metadata": {"name": "wandb-job-b", "namespace": "ns", "uid": "uid-new"}}


class SecretStore:
    """One namespace's Secrets; ``collect_before`` deletes the Secret just before that call
    (``"get"`` or ``"patch"``) the given number of times, as the garbage collector may."""

    def __init__(self, existing: dict[str, Any] | None, collect_before: str = "", times: int = 1):
        self.secrets = {} if existing is None else {existing["metadata"]["name"]: existing}
        self.collect_before, self.times = collect_before, times
        self.calls: list[str] = []

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
        self.secrets[name]["metadata"]["ownerReferences"] = patch["metadata"]["ownerReferences"]
        self.secrets[name]["stringData"] = patch["stringData"]
        return self.secrets[name]["metadata"]


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

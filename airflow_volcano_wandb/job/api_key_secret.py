"""The W&B API key's Kubernetes Secret: named for the task instance, owned by its job.

The key reaches the pods only through a ``secretKeyRef``, never in the job spec. The Secret is
written *before* a job is created (:func:`prepare`) and given the job as its owner right after
(:func:`store_for_job`); Kubernetes deletes it with its last owner job.

Why before: a pod whose ``secretKeyRef`` does not resolve waits in
``CreateContainerConfigError`` on the node it was placed on, holding its GPUs, and nothing in
Kubernetes or Volcano ends such a wait (Volcano's policies have no pending event, and a pod's
``activeDeadlineSeconds`` would bound the training too). Written after the job, a submitter
killed between the two writes left such a job for ever when no retry came. Written before,
every job has its key from its first moment; the price is that window's other side: a kill
between the Secret and the job's ownership leaves the Secret without an owner until the next
try of the task instance adopts it (its name is the task instance's), and a job Kubernetes
refuses gets its Secret collected (:func:`abandon`).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from urllib3.exceptions import HTTPError as Urllib3Error

from airflow_volcano_wandb.hooks.kubernetes_api import GROUP, VERSION, SecretExistsError
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity, owner_of
from airflow_volcano_wandb.wandb.wandb_run import SecretKeyRef

API_KEY_FIELD = "api-key"


class KeyNotDeliveredError(RuntimeError):
    """The key's Secret could not be written: nothing was submitted, or the job was withdrawn."""


class SecretOwnedElsewhereError(KeyNotDeliveredError):
    """A Secret of our name belongs to something else; it holds someone else's key."""


def secret_ref(identity: TaskInstanceIdentity) -> SecretKeyRef:
    """Where the pods of this task instance's job read the key: known before rendering."""
    return SecretKeyRef(f"avw-wandb-key-{identity.digest[:20]}", API_KEY_FIELD)


def owner_reference(job: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to the Volcano job, so the Secret is garbage-collected with it."""
    meta = job["metadata"]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Job",
        "name": meta["name"],
        "uid": meta["uid"],
        "blockOwnerDeletion": False,
        "controller": False,
    }


#: Create-or-refresh rounds before giving up on a Secret that keeps vanishing under us.
STORE_ATTEMPTS = 3


#: Seconds to wait for the garbage collector to take a Secret whose owners are all gone.
COLLECTION_WAIT = 60.0


def secret_body(
    identity: TaskInstanceIdentity, job: Mapping[str, Any] | None, api_key: str
) -> dict[str, Any]:
    """The Secret holding the key, owned by ``job`` from its creation (none: no owner yet)."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_ref(identity).name,
            "labels": identity.labels(),
            "annotations": identity.annotations(),
            "ownerReferences": [owner_reference(job)] if job is not None else [],
        },
        "type": "Opaque",
        "stringData": {API_KEY_FIELD: api_key},
    }


def store_for_job(
    hook: VolcanoHook, identity: TaskInstanceIdentity, job: Mapping[str, Any], api_key: str
) -> None:
    """Give ``job`` the current key in its Secret, creating or refreshing it.

    A Secret of that name left by an earlier try of this task instance gets the current key
    and the new owner; one that belongs to anything else is never touched (it may hold
    another team's key) and raises :class:`SecretOwnedElsewhereError`. An earlier try's
    Secret may be garbage-collected with its deleted job at any moment, between our read and
    our patch too: then it is created again.
    """
    body = secret_body(identity, job, api_key)
    name, namespace = body["metadata"]["name"], job["metadata"]["namespace"]
    for _ in range(STORE_ATTEMPTS):
        try:
            hook.create_secret(body, namespace)
            return
        except SecretExistsError:
            existing = hook.get_secret_metadata(name, namespace)
        if existing is None:  # collected with an earlier job since: ours to create after all
            continue
        if not identity.owns({"metadata": existing}):
            raise SecretOwnedElsewhereError(
                f"A Secret named {namespace}/{name} already exists and belongs to "
                f"{owner_of({'metadata': existing})}; it was left alone"
            )
        uid = job["metadata"]["uid"]
        owners = [ref for ref in existing.get("ownerReferences") or [] if ref.get("uid") != uid]
        patched = hook.patch_secret(
            name,
            namespace,
            {
                "metadata": {"ownerReferences": [*owners, owner_reference(job)]},
                "stringData": body["stringData"],
            },
        )
        if patched is not None:
            return
    raise KeyNotDeliveredError(
        f"The Secret {namespace}/{name} kept being deleted while it was written "
        f"({STORE_ATTEMPTS} attempts)"
    )


def prepare(
    hook: VolcanoHook, identity: TaskInstanceIdentity, namespace: str, api_key: str
) -> None:
    """Write the current key into the task instance's Secret before a job is created.

    Created without an owner, or an existing Secret of this task instance refreshed. One whose
    owners are all gone or going (an earlier try's job just deleted) is about to be collected
    with them, whatever is written into it meanwhile: it is waited out (``COLLECTION_WAIT``)
    and created afresh, so the job never starts without it. A Secret of that name belonging
    to anything else raises :class:`SecretOwnedElsewhereError` before any job exists.
    """
    body = secret_body(identity, None, api_key)
    name = body["metadata"]["name"]
    for _ in range(STORE_ATTEMPTS):
        try:
            hook.create_secret(body, namespace)
            return
        except SecretExistsError:
            existing = hook.get_secret_metadata(name, namespace)
        if existing is None:  # collected since: create it
            continue
        if not identity.owns({"metadata": existing}):
            raise SecretOwnedElsewhereError(
                f"A Secret named {namespace}/{name} already exists and belongs to "
                f"{owner_of({'metadata': existing})}; it was left alone and nothing was submitted"
            )
        owners = existing.get("ownerReferences") or []
        if owners and not any(_owner_lives(hook, namespace, ref) for ref in owners):
            _wait_collected(hook, name, namespace)
            continue
        if hook.patch_secret(name, namespace, {"stringData": body["stringData"]}) is not None:
            return
    raise KeyNotDeliveredError(
        f"The Secret {namespace}/{name} kept being deleted while it was written "
        f"({STORE_ATTEMPTS} attempts)"
    )


def _owner_lives(hook: VolcanoHook, namespace: str, ref: Mapping[str, Any]) -> bool:
    """Whether the owner job is there, that very one, and not being deleted."""
    if ref.get("kind") != "Job":
        return True  # not ours to judge: count it as alive
    job = hook.get_job(str(ref.get("name")), namespace)
    meta = (job or {}).get("metadata") or {}
    return meta.get("uid") == ref.get("uid") and not meta.get("deletionTimestamp")


def _wait_collected(hook: VolcanoHook, name: str, namespace: str) -> None:
    deadline = time.monotonic() + COLLECTION_WAIT
    while hook.get_secret_metadata(name, namespace) is not None:
        if time.monotonic() > deadline:
            raise KeyNotDeliveredError(
                f"The Secret {namespace}/{name} outlived its owner jobs by {COLLECTION_WAIT:.0f}s "
                "(is the garbage collector running?); nothing was submitted"
            )
        time.sleep(0.5)


def abandon(hook: VolcanoHook, identity: TaskInstanceIdentity, namespace: str) -> None:
    """Let the garbage collector delete the Secret written for a job that was never created.

    The provider may not delete Secrets (its Role has no ``delete`` on them); instead the
    Secret gets an owner that does not exist (a Job named like the Secret, under a uid no
    object has), and Kubernetes deletes a dependent whose owners are all absent. A Secret a
    live job still owns stays. A Secret left behind is adopted by the next try.
    """
    name = secret_ref(identity).name
    absent = {"metadata": {"name": name, "uid": str(uuid.uuid4())}}
    hook.patch_secret(name, namespace, {"metadata": {"ownerReferences": [owner_reference(absent)]}})


def hand_to_job(
    hook: VolcanoHook,
    identity: TaskInstanceIdentity,
    job: Mapping[str, Any],
    api_key: str,
    *,
    created: bool,
    withdraw: Callable[[], None],
) -> None:
    """Make ``job`` the owner of the key's Secret (with the current key); a new job that
    cannot have it is withdrawn.

    A new job's Secret was written before it (:func:`prepare`): it only gains its owner here.
    A reattached job's may lack one (its submitter was killed in between) or be gone. A new
    job whose Secret cannot be owned by it would leave the key behind it, or, when the name is
    taken by someone else's Secret, read their key: it is withdrawn. A reattached job keeps
    running, and so does any job when the API was out of reach: the next try reattaches and
    makes it the owner.
    """
    try:
        store_for_job(hook, identity, job, api_key)
    except (Urllib3Error, ConnectionError):
        raise
    except Exception as exc:
        if created or isinstance(exc, SecretOwnedElsewhereError):
            withdraw()
            raise KeyNotDeliveredError(
                f"The W&B API key could not be given to the job ({exc}); the job was withdrawn"
            ) from exc
        raise


@dataclass(frozen=True)
class Handover:
    """The key's Secret through one try's submission, for the operator: written before each
    create (:meth:`prepare`), owned by the job the try ends up with (:meth:`give_to`), left
    to the garbage collector when Kubernetes refuses the job (:meth:`abandon`). Without an
    ``api_key`` (the DAG brings its own Secret, or runs without a key) each does nothing."""

    hook: VolcanoHook
    identity: TaskInstanceIdentity
    namespace: str
    api_key: str | None
    task_log: logging.Logger | Any

    def prepare(self) -> None:
        if self.api_key:
            prepare(self.hook, self.identity, self.namespace, self.api_key)

    def give_to(
        self, job: Mapping[str, Any], *, created: bool, withdraw: Callable[[], None]
    ) -> None:
        if self.api_key:
            hand_to_job(
                self.hook, self.identity, job, self.api_key, created=created, withdraw=withdraw
            )

    def abandon(self) -> None:
        """After a submission that created no job; best-effort (the next try adopts it)."""
        if not self.api_key:
            return
        try:
            abandon(self.hook, self.identity, self.namespace)
        except Exception as exc:
            self.task_log.warning("Could not let the key's Secret go (%s)", exc)

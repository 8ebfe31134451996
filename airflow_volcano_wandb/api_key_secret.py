"""The W&B API key's Kubernetes Secret: named for the task instance, owned by its job.

The key reaches the pods only through a ``secretKeyRef``, never in the job spec. The Secret is
written *after* the job exists and owned by it from its first moment, so no crash window
leaves the key in a Secret that nothing will delete; the job's pods wait for it (the kubelet
retries a missing ``secretKeyRef``). Kubernetes deletes the Secret with its last owner job.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from urllib3.exceptions import HTTPError as Urllib3Error

from airflow_volcano_wandb.hooks.kubernetes_api import GROUP, VERSION, SecretExistsError
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.ownership import TaskInstanceIdentity, owner_of
from airflow_volcano_wandb.wandb_run import SecretKeyRef

API_KEY_FIELD = "api-key"


class SecretOwnedElsewhereError(RuntimeError):
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


def secret_body(
    identity: TaskInstanceIdentity, job: Mapping[str, Any], api_key: str
) -> dict[str, Any]:
    """The Secret holding the key, owned by ``job`` from its creation."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": secret_ref(identity).name,
            "labels": identity.labels(),
            "annotations": identity.annotations(),
            "ownerReferences": [owner_reference(job)],
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
    raise RuntimeError(
        f"The Secret {namespace}/{name} kept being deleted while it was written "
        f"({STORE_ATTEMPTS} attempts)"
    )


class KeyNotDeliveredError(RuntimeError):
    """The job could not be given its key's Secret and was withdrawn."""


def hand_to_job(
    hook: VolcanoHook,
    identity: TaskInstanceIdentity,
    job: Mapping[str, Any],
    api_key: str,
    *,
    created: bool,
    withdraw: Callable[[], None],
) -> None:
    """Write the key's Secret for ``job``; a new job that cannot have it is withdrawn.

    Its pods would wait for the Secret for ever, or, when the name is taken by someone
    else's Secret, read their key. A reattached job keeps running, and so does any job when
    the API was out of reach: the next try reattaches and writes the Secret.
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

"""The W&B API key's Kubernetes Secret: one per job, created after it and owned by it.

The key reaches the pods only through a ``secretKeyRef``. Each render names a Secret of its
own (:func:`fresh_ref`: random, unknowable before the job exists); once the job exists,
:func:`deliver` creates it, ``immutable``, with the job as its owner, so Kubernetes deletes
it with the job. That create is the only Secret call the provider makes, so its Role grants
Secrets ``create`` and nothing else (a PATCH answers with the whole object, so ``patch``
would read every Secret as ``get`` does).

A 409 on a job this try just created means someone raced us to a name only its spec carries:
the job is withdrawn and the try fails. On a job an earlier try created, that try delivered
its key, which is kept. docs/security.md says the price: a submitter lost between the two
creates leaves pods waiting in ``CreateContainerConfigError`` until the next try delivers.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.hooks.kubernetes_api import (
    GROUP,
    RETRYABLE_STATUSES,
    VERSION,
    SecretExistsError,
    unreachable_errors,
)
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.wandb.wandb_run import SecretKeyRef

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

API_KEY_FIELD = "api-key"
#: Every key Secret the provider names starts so; a job naming another Secret brought its own.
NAME_PREFIX = "avw-wandb-key-"
#: The env entry the pods read the key from (``wandb_env``'s).
API_KEY_ENV = "WANDB_API_KEY"


class KeyNotDeliveredError(RuntimeError):
    """The key's Secret could not be created for a new job: the job was withdrawn."""


def fresh_ref() -> SecretKeyRef:
    """A new name for the key Secret of the job about to be rendered (128 random bits)."""
    return SecretKeyRef(NAME_PREFIX + secrets.token_hex(16), API_KEY_FIELD)


def named_by(job: Mapping[str, Any]) -> SecretKeyRef | None:
    """The provider's key Secret the job's pods read, as its spec says (None: the job reads
    no key, or one the DAG brought, which is not the provider's to create)."""
    for env in _env_entries(job):
        ref = (env.get("valueFrom") or {}).get("secretKeyRef") or {}
        name, key = ref.get("name"), ref.get("key")
        if env.get("name") == API_KEY_ENV and isinstance(name, str) and isinstance(key, str):
            return SecretKeyRef(name, key) if name.startswith(NAME_PREFIX) else None
    return None


def _env_entries(job: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for task in (job.get("spec") or {}).get("tasks") or []:
        pod = (task.get("template") or {}).get("spec") or {}
        for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
            yield from container.get("env") or []


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


def secret_body(
    identity: TaskInstanceIdentity, job: Mapping[str, Any], ref: SecretKeyRef, api_key: str
) -> dict[str, Any]:
    """The Secret holding the key, owned by ``job`` from its creation and never changed."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": ref.name,
            "labels": identity.labels(),
            "annotations": identity.annotations(),
            "ownerReferences": [owner_reference(job)],
        },
        "type": "Opaque",
        "immutable": True,
        "stringData": {ref.key: api_key},
    }


def deliver(
    hook: VolcanoHook,
    identity: TaskInstanceIdentity,
    job: Mapping[str, Any],
    api_key: str,
    *,
    created: bool,
    withdraw: Callable[[], None],
    task_log: logging.Logger | Any,
) -> None:
    """Create the key Secret ``job`` names, owned by it; a new job that cannot have it is
    withdrawn.

    :param created: this try created the job (else an earlier try did: reattached, adopted).
    :param withdraw: deletes the job (``deletion.delete_if_owned``).

    A 409 for a new job is a name someone else took: withdrawn, :class:`KeyNotDeliveredError`;
    unless an earlier attempt of the same create may have made it (its answer lost), which is
    ours. A 409 for an earlier try's job is its Secret, delivered then. Any other failure
    withdraws a new job, except an API out of reach: the job keeps running, and the next try
    reattaches and delivers.
    """
    ref = named_by(job)
    if ref is None:
        return
    meta = job["metadata"]
    namespace = meta["namespace"]
    try:
        hook.create_secret(secret_body(identity, job, ref, api_key), namespace)
        return
    except SecretExistsError as exc:
        if not created or exc.maybe_ours:
            task_log.info("The key's Secret %s/%s was delivered before", namespace, ref.name)
            return
        failure: Exception = exc
        said = f"a Secret named {namespace}/{ref.name} was created by someone else first"
    except unreachable_errors():
        raise
    except Exception as exc:
        # A transient answer (5xx, throttling) is no verdict on the job: it keeps running and
        # the next try reattaches and delivers, as when the API is out of reach.
        if not created or getattr(exc, "status", None) in RETRYABLE_STATUSES:
            raise
        failure, said = exc, f"the Secret {namespace}/{ref.name} could not be created ({exc})"
    withdraw()
    raise KeyNotDeliveredError(
        f"The W&B API key was not given to the Volcano job {namespace}/{meta['name']}: {said}; "
        "the job was withdrawn"
    ) from failure

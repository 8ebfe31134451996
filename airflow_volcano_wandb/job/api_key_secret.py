"""The W&B API key's Kubernetes Secret: one per job, created after it and owned by it.

Each render names a Secret of its own (:func:`fresh_ref`, unknowable before the job exists);
:func:`deliver` creates it, ``immutable``, owned by the job, so Kubernetes deletes it with the
job, and the Role grants Secrets ``create`` and nothing else. A 409 on a job this try created
means someone raced us to the name: the job is withdrawn (docs/security.md).
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
    """Create the key Secret ``job`` names, owned by it (``created``: by this try). A 409 for
    a new job is a name someone else took: the job is withdrawn (:class:`KeyNotDeliveredError`),
    unless a lost answer of our own create made it; for an earlier try's job it is the Secret it
    delivered. Any other failure withdraws a new job, except an API out of reach."""
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

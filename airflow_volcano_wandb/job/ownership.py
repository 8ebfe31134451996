"""Which Airflow task instance, and which of its intents, a Volcano job belongs to.

Every job this provider submits carries labels naming its task instance (and deployment), so
that a retry, a restarted worker or a second scheduler finds the job that is already there.
Label values are length-limited and sanitized, so the match is made on a hash of the exact
identity; the readable labels are for people and ``kubectl``.

A job belongs to exactly one intent: the try that submitted it, or the newest try that
adopted it (``try-number``). Once a try reports the job's outcome (``reported-by-try``), the
job is a past result: no later try reattaches to it or counts it as its own, and the only
later try that may delete it is one of the same task instance that needs its name (a fixed
job name, see :func:`replaceable_past`).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.job.job_view import ObjectMeta
from airflow_volcano_wandb.template.naming import is_label_value, label_value

DOMAIN = "airflow-volcano-wandb.io"
MANAGED_BY = "airflow-volcano-wandb"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
IDENTITY_LABEL = f"{DOMAIN}/task-instance"
DAG_ID_LABEL = f"{DOMAIN}/dag-id"
TASK_ID_LABEL = f"{DOMAIN}/task-id"
RUN_ID_LABEL = f"{DOMAIN}/run-id"
MAP_INDEX_LABEL = f"{DOMAIN}/map-index"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY}"
DEPLOYMENT_LABEL = f"{DOMAIN}/deployment"
WANDB_RUN_LABEL = f"{DOMAIN}/wandb-run-id"
#: On every pod: the try that submitted the pod's job (a reattaching try keeps its pods).
POD_TRY_LABEL = f"{DOMAIN}/try-number"
#: The intent a job was submitted for (see :func:`next_intent`).
INTENT_LABEL = f"{DOMAIN}/intent"
#: The try that owns the wait on the job now: its submitter, or the newest try that adopted it.
TRY_NUMBER_ANNOTATION = f"{DOMAIN}/try-number"
#: Set once a try has reported the job's outcome.
REPORTED_ANNOTATION = f"{DOMAIN}/reported-by-try"
IDENTITY_ANNOTATION = f"{DOMAIN}/task-instance"


@dataclass(frozen=True)
class TaskInstanceIdentity:
    """A task instance, without the try: all tries of it own the same job."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int = -1
    #: The Airflow deployment (``[volcano_wandb] deployment``); "" when not configured.
    deployment: str = ""

    @property
    def key(self) -> str:
        key = f"{self.dag_id}/{self.task_id}/{self.run_id}/{self.map_index}"
        # Unset keeps the key (and the hash) of versions without deployments.
        return f"{self.deployment}:{key}" if self.deployment else key

    @property
    def digest(self) -> str:
        """A label-safe, collision-resistant id of the exact identity."""
        return hashlib.sha256(self.key.encode()).hexdigest()[:40]

    def labels(self) -> dict[str, str]:
        return {
            MANAGED_BY_LABEL: MANAGED_BY,
            IDENTITY_LABEL: self.digest,
            DAG_ID_LABEL: label_value(self.dag_id),
            TASK_ID_LABEL: label_value(self.task_id),
            RUN_ID_LABEL: label_value(self.run_id),
            # -1 (not mapped) is no valid label value: it may not start with "-".
            MAP_INDEX_LABEL: str(self.map_index) if self.map_index >= 0 else "none",
            **({DEPLOYMENT_LABEL: label_value(self.deployment)} if self.deployment else {}),
        }

    def job_labels(self, intent: int, wandb_run_id: str) -> dict[str, str]:
        """The labels of this identity's job for ``intent``, naming its W&B run.

        The run id is a label so a reattaching try finds the run, but only when it is a valid
        label value (a user's own run id may not be).
        """
        run = {WANDB_RUN_LABEL: wandb_run_id} if is_label_value(wandb_run_id) else {}
        return {**self.labels(), **run, INTENT_LABEL: str(intent)}

    def pod_labels(self, try_number: int) -> dict[str, str]:
        """The labels of every pod of this identity's job, submitted by ``try_number``.

        Volcano copies only a few of a job's labels to its pods, so the pod templates carry
        them: ``kubectl get pods -l``, cost allocation (OpenCost, Kubecost) and log tools
        attribute each pod to its Airflow task instance and try, as ``KubernetesPodOperator``'s
        pods are labelled.
        """
        return {**self.labels(), POD_TRY_LABEL: str(try_number)}

    def annotations(self, try_number: int | None = None) -> dict[str, str]:
        annotations = {IDENTITY_ANNOTATION: self.key}
        if try_number is not None:
            annotations[TRY_NUMBER_ANNOTATION] = str(try_number)
        return annotations

    def selector(self) -> str:
        """A label selector that finds this task instance's jobs (and Secrets)."""
        return f"{MANAGED_SELECTOR},{IDENTITY_LABEL}={self.digest}"

    def owns(self, obj: Mapping[str, Any]) -> bool:
        return ObjectMeta.of(obj).labels.get(IDENTITY_LABEL) == self.digest


def owner_of(obj: Mapping[str, Any]) -> str:
    """The task instance named on an object, for error messages about name clashes."""
    annotations = ObjectMeta.of(obj).annotations
    return str(annotations.get(IDENTITY_ANNOTATION) or "something other than this provider")


def _annotation(obj: Mapping[str, Any], name: str) -> str | None:
    return ObjectMeta.of(obj).annotation(name)


def _number(value: Any) -> int | None:
    return int(value) if value and str(value).isdigit() else None


def is_reported(job: Mapping[str, Any]) -> bool:
    """Whether a try has reported this job's outcome (it is a past result)."""
    return _annotation(job, REPORTED_ANNOTATION) is not None


def reported_by(job: Mapping[str, Any]) -> int | None:
    """The try that reported the job's outcome, if one did."""
    return _number(_annotation(job, REPORTED_ANNOTATION))


def replaceable_past(
    job: Mapping[str, Any], identity: TaskInstanceIdentity, try_number: int
) -> bool:
    """Whether ``try_number`` may replace ``job``, a past result under the name it needs.

    Only a job an *earlier* try of this very task instance reported: the identity hash and
    the exact identity written on it (deployment included) are this task instance's. A job
    reported by this try number or a later one is not (the metadata DB was reset, or a
    second deployment shares the identity): it is left alone.
    """
    by = reported_by(job)
    return (
        identity.owns(job)
        and _annotation(job, IDENTITY_ANNOTATION) == identity.key
        and by is not None
        and by < try_number
    )


def owner_try(job: Mapping[str, Any]) -> int | None:
    """The try that owns the wait on the job: its submitter or newest adopter."""
    return _number(_annotation(job, TRY_NUMBER_ANNOTATION))


def wandb_run_of(job: Mapping[str, Any]) -> str | None:
    """The W&B run id the job's pods write to, as recorded at submission."""
    return ObjectMeta.of(job).labels.get(WANDB_RUN_LABEL)


def may_delete(job: Mapping[str, Any] | None, uid: str | None, try_number: int | None) -> bool:
    """Whether a cleanup by ``try_number`` may delete ``job`` as it reads now.

    Only the submission it waited on (``uid``), and only while no newer try has adopted it:
    a late ``on_kill`` of an old try must not delete what a newer try reattached to.
    """
    if job is None or (uid and ObjectMeta.of(job).uid != uid):
        return False
    owner = owner_try(job)
    return try_number is None or owner is None or owner == try_number


def intent_of(job: Mapping[str, Any]) -> int | None:
    """The intent number a job was submitted for, from its label."""
    return _number(ObjectMeta.of(job).labels.get(INTENT_LABEL))


def next_intent(existing: Iterable[Mapping[str, Any]], try_number: int) -> int:
    """The intent a fresh submission by ``try_number`` stands for.

    Normally the try number. A try that runs under the number of a try whose outcome was
    already reported (``airflow tasks test``, a metadata DB reset) takes the next free one,
    so its job and W&B run never take the reported one's name.
    """
    taken = {intent_of(job) for job in existing if is_reported(job)}
    return next(intent for intent in itertools.count(try_number) if intent not in taken)


def selector_matches(selector: str | None, job: Mapping[str, Any]) -> bool:
    """Whether ``job`` matches an equality-based label selector (``k=v,k2=v2``; ``None``
    matches everything): the kind of selector this provider watches with."""
    if not selector:
        return True
    labels = ObjectMeta.of(job).labels
    pairs = (requirement.partition("=") for requirement in selector.split(","))
    return all(labels.get(key.strip()) == value.strip() for key, _, value in pairs)


def pods_managed(job: Mapping[str, Any] | None) -> bool:
    """Whether every task of ``job`` labels its pods as this provider's (``MANAGED_BY_LABEL``
    on its pod template), as the operator's jobs do: only then does a watch of managed pods
    see all of the job's pods."""
    tasks = ((job or {}).get("spec") or {}).get("tasks") or []
    return bool(tasks) and all(
        ObjectMeta.of(task.get("template") or {}).labels.get(MANAGED_BY_LABEL) == MANAGED_BY
        for task in tasks
    )

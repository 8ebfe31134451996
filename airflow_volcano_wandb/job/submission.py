"""Submit a rendered job, or reattach to the one this task instance already has.

:func:`decide` is the pure rule for a job found with this task instance's identity;
:func:`submit_or_reattach` carries the decisions out through ``VolcanoHook``. One task
instance owns at most one live job, whatever its tries: a retry or a restarted worker finds
the job that is already there instead of submitting a second.

Where Airflow gives the task a state store (Airflow 3.3's ``context["task_state_store"]``,
kept per task instance across its tries), the job is remembered there by uid as soon as it
exists (:func:`remember`), and the next try reattaches to exactly that job
(:func:`reattach_remembered`); the label search is the fallback when the store is absent,
empty, or names a job that may not be reused.

A reported job is a past result and stays beside the fresh submission, except under a fixed
name (``job_name``, a template name without ``${run_id}``): then the create meets it, and an
earlier try's reported job of this very task instance is replaced (a delete with the uid and
resourceVersion read, a GET until it is gone, the create); any other owner's job is refused.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from enum import Enum
from typing import Any, NamedTuple, TypeVar

from kubernetes.client.rest import ApiException

from airflow_volcano_wandb.hooks.kubernetes_api import (
    RETRYABLE_STATUSES,
    JobExistsError,
    KubernetesPermissionError,
    api_message,
)
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.job import job_status
from airflow_volcano_wandb.job.job_status import Verdict
from airflow_volcano_wandb.job.ownership import (
    TRY_NUMBER_ANNOTATION,
    TaskInstanceIdentity,
    is_reported,
    next_intent,
    owner_of,
    owner_try,
    replaceable_past,
    reported_by,
)

log = logging.getLogger(__name__)
#: The W&B run spec rendered with a job body; this module only passes it along.
Spec = TypeVar("Spec")

#: Creates of one name before giving up on a name that keeps being taken under us.
CREATE_ATTEMPTS = 3
#: The task state store's key for the job this task instance's tries wait on.
STATE_STORE_KEY = "volcano_job"


class Decision(str, Enum):
    """What to do with a job of this task instance found before submitting."""

    REUSE = "reuse"  # the unreported job of this task: wait on it (or report it, if completed)
    REPLACE = "replace"  # delete it, let it go, then submit afresh
    WAIT_GONE = "wait_gone"  # it is being deleted already: let it go, then submit afresh
    PAST = "past"  # an outcome some try already reported: leave it, submit afresh


class Submitted(NamedTuple):
    """The job a try waits on, and whether this try created it (else it reattached)."""

    job: dict[str, Any]
    created: bool


class SubmissionError(RuntimeError):
    """Nothing was submitted, for a reason a retry cannot fix (the message says which)."""


class RefusedError(SubmissionError):
    """Kubernetes refused the create outright (a 4xx: admission, validation, permission)."""


def decide(job: Mapping[str, Any], *, reattach: bool) -> Decision:
    """The rule for an existing job of this task instance's identity."""
    status = job_status.interpret(job)
    if is_reported(job):
        # Clearing a successful task must train again, not count the old result.
        return Decision.PAST
    if status.verdict is Verdict.DELETED:
        # Being deleted (a kill or clear of an earlier try): reattaching would only see it
        # vanish.
        return Decision.WAIT_GONE
    if status.verdict is Verdict.SUCCEEDED:
        return Decision.REUSE
    if not status.terminal and reattach:
        return Decision.REUSE
    return Decision.REPLACE


def refused_outright(exc: BaseException) -> bool:
    """The apiserver said no to the create: no job was made by this try.

    Timeouts, throttling and 5xx are not: the create may have been applied with its answer
    lost, and the next try reattaches to that job.
    """
    if isinstance(exc, ApiException):
        return 400 <= exc.status < 500 and exc.status not in (*RETRYABLE_STATUSES, 409)
    return isinstance(exc, KubernetesPermissionError)


def submit_or_reattach(
    hook: VolcanoHook,
    body: dict[str, Any],
    identity: TaskInstanceIdentity,
    *,
    try_number: int,
    reattach: bool,
    existing: list[dict[str, Any]] | None = None,
    before_create: Callable[[], None] | None = None,
    task_log: logging.Logger | Any = log,
) -> Submitted:
    """The job this try waits on: the unreported one it may reuse (adopted by this try, so
    an older try's late ``on_kill`` leaves it alone), or a new one.

    :param before_create: runs right before each create, once every job it replaces is gone
        (the API key's Secret is written there, so a new job never lacks it).
    """
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    for existing in hook.list_jobs(namespace, identity.selector()):
        job = _carry_out(
            hook, existing, try_number=try_number, reattach=reattach, task_log=task_log
        )
        if job is not None:
            return Submitted(job, created=False)
    for _ in range(CREATE_ATTEMPTS):
        if before_create is not None:
            before_create()
        try:
            job = _create(hook, body)
            task_log.info("Submitted Volcano job %s/%s", namespace, job["metadata"]["name"])
            return Submitted(job, created=True)
        except JobExistsError:
            existing = hook.get_job(name, namespace)
        if existing is None:  # gone since the create's answer: create again
            continue
        if not identity.owns(existing):
            raise SubmissionError(
                f"A Volcano job named {namespace}/{name} already exists and belongs to "
                f"{owner_of(existing)}; set job_name or a template name that is unique per "
                "task instance. Nothing was submitted."
            )
        if is_reported(existing):
            # A fixed name (job_name, a template name without ${run_id}, a user's run id):
            # an earlier try's reported job holds the name this try needs.
            if not replaceable_past(existing, identity, try_number):
                raise SubmissionError(
                    f"A Volcano job named {namespace}/{name} holds an outcome of this task "
                    f"instance that try {reported_by(existing)} already reported (an Airflow "
                    "metadata DB reset, or a second deployment without [volcano_wandb] "
                    "deployment?); it was left alone and nothing was submitted."
                )
            _replace_past(hook, existing, task_log)
            continue
        # Our own create whose answer was lost, or a concurrent try: the job is ours.
        job = _carry_out(
            hook, existing, try_number=try_number, reattach=reattach, task_log=task_log
        )
        if job is not None:
            return Submitted(job, created=False)
    raise SubmissionError(
        f"The name {namespace}/{name} was taken again each time its job was created "
        f"({CREATE_ATTEMPTS} attempts); nothing was submitted."
    )


def _replace_past(hook: VolcanoHook, job: dict[str, Any], task_log: Any) -> None:
    """Delete an earlier try's reported job, as read, and wait until it is gone.

    The delete carries the uid and resourceVersion just read: a job changed or recreated
    since is not deleted (the caller reads the name again). Only a delete that took is
    waited on, until a GET confirms the job (and, by foreground deletion, its pods) gone.
    """
    meta = job["metadata"]
    task_log.info(
        "Replacing Volcano job %s/%s: try %s reported its outcome, and this try needs its name",
        meta["namespace"],
        meta["name"],
        reported_by(job),
    )
    if hook.delete_job(
        meta["name"], meta["namespace"], uid=meta["uid"], resource_version=meta["resourceVersion"]
    ):
        hook.wait_job_gone(meta["name"], meta["namespace"])


def _create(hook: VolcanoHook, body: dict[str, Any]) -> dict[str, Any]:
    try:
        return hook.create_job(body, body["metadata"]["namespace"])
    except (ApiException, KubernetesPermissionError) as exc:
        if not refused_outright(exc):
            raise
        meta = body["metadata"]
        said = api_message(exc) if isinstance(exc, ApiException) else str(exc)
        status = f" (HTTP {exc.status})" if isinstance(exc, ApiException) else ""
        raise RefusedError(
            f"Kubernetes refused the Volcano job {meta['namespace']}/{meta['name']}{status}: "
            f"{said}. Nothing was submitted."
        ) from exc


def _carry_out(
    hook: VolcanoHook, job: dict[str, Any], *, try_number: int, reattach: bool, task_log: Any
) -> dict[str, Any] | None:
    """Apply :func:`decide` to one existing job; the job when it is reused, else None."""
    status = job_status.interpret(job)
    decision = decide(job, reattach=reattach)
    if decision is Decision.PAST:
        return None
    if decision is Decision.REUSE:
        if owner_try(job) != try_number:
            # Adopt it: an older try's late on_kill now leaves it alone.
            adopted = hook.set_job_annotations(
                status.name, status.namespace, status.uid, {TRY_NUMBER_ANNOTATION: str(try_number)}
            )
            if adopted is None:  # gone meanwhile
                return None
            job = adopted
        if not status.terminal:
            task_log.info(
                "Reattaching to running Volcano job %s/%s (%s)",
                status.namespace,
                status.name,
                status.progress(),
            )
        return job
    if decision is Decision.WAIT_GONE:
        task_log.info(
            "Earlier job %s/%s is being deleted; waiting for it to go before resubmitting",
            status.namespace,
            status.name,
        )
    else:
        task_log.info(
            "Deleting this task instance's earlier job %s/%s (%s) before resubmitting",
            status.namespace,
            status.name,
            status.phase or "no phase",
        )
        hook.delete_job(status.name, status.namespace, uid=status.uid)
    hook.wait_job_gone(status.name, status.namespace)
    return None


def recall(store: Any, task_log: Any = log) -> dict[str, str] | None:
    """The job reference (``name``, ``namespace``, ``uid``) a task state store remembers.

    :param store: ``context["task_state_store"]``, or None where Airflow has none.
    :param task_log: where a store that cannot be read is reported (the labels still work).
    """
    if store is None:
        return None
    try:
        ref = store.get(STATE_STORE_KEY)
    except Exception as exc:  # the store is an optimisation: never fail the task for it
        task_log.warning("Could not read the task state store (%s); searching by labels", exc)
        return None
    if isinstance(ref, dict) and all(
        isinstance(ref.get(k), str) for k in ("name", "namespace", "uid")
    ):
        return {k: ref[k] for k in ("name", "namespace", "uid")}
    return None


def remember(store: Any, ref: Mapping[str, str], task_log: Any = log) -> None:
    """Remember the job this try waits on, for the task instance's next try.

    :param store: ``context["task_state_store"]``, or None where Airflow has none.
    :param ref: the job's ``name``, ``namespace`` and ``uid``.
    :param task_log: where a store that cannot be written is reported.
    """
    if store is None:
        return
    try:
        store.set(STATE_STORE_KEY, {k: ref[k] for k in ("name", "namespace", "uid")})
    except Exception as exc:
        task_log.warning(
            "Could not write the task state store (%s); labels still find the job", exc
        )


def reattach_remembered(
    hook: VolcanoHook,
    ref: Mapping[str, str] | None,
    *,
    try_number: int,
    reattach: bool,
    task_log: Any = log,
) -> dict[str, Any] | None:
    """The remembered job, adopted by this try, when :func:`decide` would reuse it; else None.

    Only that very submission (same uid) counts: a job recreated under its name is not it.
    Anything other than reuse (a reported, failed or dying job) is left to the label search,
    which applies the whole rule.
    """
    if not ref:
        return None
    job = hook.get_job(ref["name"], ref["namespace"])
    if job is None or (job.get("metadata") or {}).get("uid") != ref["uid"]:
        return None
    if decide(job, reattach=reattach) is not Decision.REUSE:
        return None
    task_log.info(
        "The task state store names job %s/%s (uid %s)", ref["namespace"], ref["name"], ref["uid"]
    )
    return _carry_out(hook, job, try_number=try_number, reattach=reattach, task_log=task_log)


def submit_for_try(
    hook: VolcanoHook,
    rendered: tuple[Spec, dict[str, Any]],
    render: Callable[[int], tuple[Spec, dict[str, Any]]],
    identity: TaskInstanceIdentity,
    *,
    try_number: int,
    reattach: bool,
    store: Any = None,
    before_create: Callable[[], None] | None = None,
    task_log: Any = log,
) -> tuple[Spec, dict[str, Any], bool]:
    """The job this try waits on: the one the task state store remembers when it may be
    reused, else the label search's (reattach, replace or submit, for the intent
    :func:`~airflow_volcano_wandb.job.ownership.next_intent` gives). ``(spec, job, created)``.

    :param rendered: the run spec and job body rendered for ``try_number``.
    :param render: renders them for another intent (a reported job's next one).
    :param before_create: see :func:`submit_or_reattach`.
    """
    job = reattach_remembered(
        hook, recall(store, task_log), try_number=try_number, reattach=reattach, task_log=task_log
    )
    spec, body = rendered
    if job is not None:
        return spec, job, False
    existing = hook.list_jobs(body["metadata"]["namespace"], identity.selector())
    intent = next_intent(existing, try_number)
    if intent != try_number:
        spec, body = render(intent)
    job, created = submit_or_reattach(
        hook,
        body,
        identity,
        try_number=try_number,
        reattach=reattach,
        existing=existing,
        before_create=before_create,
        task_log=task_log,
    )
    return spec, job, created

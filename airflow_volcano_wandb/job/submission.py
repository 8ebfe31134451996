"""Submit a rendered job, or reattach to the one this task instance already has.

One task instance owns at most one live job, whatever its tries. :func:`submit_or_reattach`
reads once (one LIST of this task instance's jobs), plans once (``job.submission_plan``) and
carries the plan out; only a create that finds its name taken reads (that name) and plans again.
Where Airflow 3.3 gives the task a state store, the job is remembered there by uid
(:func:`remember`), and the next try reattaches to exactly that job when the plan may reuse it.
:func:`submit_for_try` adds, for one try of the operator, the key's Secret
(``job.api_key_secret``) and each failure as the Airflow exception that names its cause.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.exceptions import ApiserverUnreachableError, JobRefusedError
from airflow_volcano_wandb.hooks.kubernetes_api import (
    RETRYABLE_STATUSES,
    JobExistsError,
    KubernetesPermissionError,
    api_message,
    unreachable_errors,
)
from airflow_volcano_wandb.job import api_key_secret, deletion
from airflow_volcano_wandb.job.deployment import warn_of_other_deployments
from airflow_volcano_wandb.job.job_status import job_ref
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from airflow_volcano_wandb.job.submission_plan import Action, Job, Step, Try, plan, plan_taken

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

log = logging.getLogger(__name__)
#: The W&B run spec rendered with a job body; this module only passes it along.
Spec = TypeVar("Spec")

#: Creates of one name before giving up on a name that keeps being taken under us.
CREATE_ATTEMPTS = 3
#: The task state store's key for the job this task instance's tries wait on.
STATE_STORE_KEY = "volcano_job"
_REF_KEYS = ("name", "namespace", "uid")
#: Seconds a create waits for the pods of an earlier job of its name to go: their grace
#: period (a checkpoint's save on SIGTERM) and the kubelet's cleanup.
EARLIER_PODS_TIMEOUT = 900.0


class Submitted(NamedTuple):
    """The job a try waits on, and whether this try created it (else it reattached)."""

    job: dict[str, Any]
    created: bool


class SubmissionError(RuntimeError):
    """Nothing was submitted, for a reason a retry cannot fix (the message says which)."""


class RefusedError(SubmissionError):
    """Kubernetes refused the create outright (a 4xx: admission, validation, permission)."""


def refused_outright(exc: BaseException) -> bool:
    """The apiserver said no to the create: no job was made by this try.

    Timeouts, throttling and 5xx are not: the create may have been applied with its answer
    lost, and the next try reattaches to that job.
    """
    from kubernetes.client.rest import ApiException

    if isinstance(exc, ApiException):
        return 400 <= exc.status < 500 and exc.status not in (*RETRYABLE_STATUSES, 409)
    return isinstance(exc, KubernetesPermissionError)


def recall(store: Any, task_log: Any = log) -> dict[str, str] | None:
    """The job reference a task state store (``context["task_state_store"]``, or None where
    Airflow has none) remembers; a store that cannot be read is reported to ``task_log``."""
    if store is None:
        return None
    try:
        ref = store.get(STATE_STORE_KEY)
    except Exception as exc:  # the store is an optimisation: never fail the task for it
        task_log.warning("Could not read the task state store (%s); searching by labels", exc)
        return None
    if isinstance(ref, dict) and all(isinstance(ref.get(k), str) for k in _REF_KEYS):
        return {k: ref[k] for k in _REF_KEYS}
    return None


def remember(store: Any, ref: Mapping[str, str], task_log: Any = log) -> None:
    """Remember the job (``ref``) this try waits on in ``store`` (as :func:`recall` reads it),
    for the task instance's next try."""
    if store is None:
        return
    try:
        store.set(STATE_STORE_KEY, {k: ref[k] for k in _REF_KEYS})
    except Exception as exc:
        task_log.warning(
            "Could not write the task state store (%s); labels still find the job", exc
        )


def submit_for_try(
    hook: VolcanoHook,
    rendered: tuple[Spec, dict[str, Any]],
    render: Callable[[int], tuple[Spec, dict[str, Any]]],
    identity: TaskInstanceIdentity,
    *,
    try_number: int,
    reattach: bool,
    api_key: str | None,
    on_job: Callable[[dict[str, str]], None],
    store: Any = None,
    fit_check: Callable[[VolcanoHook], None] | None = None,
    task_log: Any = log,
) -> tuple[Spec, dict[str, Any]]:
    """This try's run spec and job: reattached or submitted, remembered, holding the key.

    :param rendered: the run spec and job body rendered for ``try_number``.
    :param render: renders them for another intent (when a reported job holds this one).
    :param api_key: the W&B key the job gets in a Secret (None: the DAG brings its own).
    :param on_job: told the job's reference as soon as the job exists (from then on the
        operator's ``on_kill`` deletes it).
    :param store: the task state store, or None where Airflow has none.
    :param fit_check: judges, right before a create (never for a reattached job), whether the
        job can be placed; raises when it never can.
    """
    try:
        if not identity.deployment:
            warn_of_other_deployments(hook, rendered[1]["metadata"]["namespace"], task_log)
        spec, job, created = submit_or_reattach(
            hook,
            rendered,
            render,
            identity,
            try_number=try_number,
            reattach=reattach,
            store=store,
            fit_check=fit_check,
            task_log=task_log,
        )
        ref = job_ref(job)
        on_job(ref)
        remember(store, ref, task_log)

        def withdraw() -> None:
            deletion.delete_if_owned(hook, ref, try_number, task_log)

        if api_key:  # else the DAG brings its own Secret, or runs without a key
            api_key_secret.deliver(
                hook, identity, job, api_key, created=created, withdraw=withdraw, task_log=task_log
            )
    except SubmissionError as exc:  # no job, and so no key Secret either
        refused = isinstance(exc, RefusedError)
        raise (JobRefusedError if refused else AirflowException)(str(exc)) from exc
    except api_key_secret.KeyNotDeliveredError as exc:
        raise AirflowException(str(exc)) from exc
    except unreachable_errors() as exc:  # the hook's bounded retries gave up
        raise ApiserverUnreachableError(
            f"Submission failed: could not reach the Kubernetes API at "
            f"{hook.api_client.configuration.host} ({type(exc).__name__}: {exc}). If the "
            "job was created before the connection was lost, the next try finds it and "
            "reattaches; otherwise nothing was submitted."
        ) from exc
    return spec, job


def submit_or_reattach(
    hook: VolcanoHook,
    rendered: tuple[Spec, dict[str, Any]],
    render: Callable[[int], tuple[Spec, dict[str, Any]]],
    identity: TaskInstanceIdentity,
    *,
    try_number: int,
    reattach: bool,
    store: Any = None,
    fit_check: Callable[[VolcanoHook], None] | None = None,
    task_log: Any = log,
) -> tuple[Spec, dict[str, Any], bool]:
    """Read once, plan once, act: ``(spec, job, created)`` for the job this try waits on.

    :param rendered: the run spec and job body rendered for ``try_number``.
    :param render: renders them for another intent (when a reported job holds this one).
    :param store: the task state store, or None where Airflow has none.
    :param fit_check: runs right before each create, once every job it replaces is gone
        (judges whether the job can be placed).
    """
    spec, body = rendered
    namespace = body["metadata"]["namespace"]
    listed = hook.list_jobs(namespace, identity.selector())
    remembered = _remembered(hook, recall(store, task_log), listed)
    this_try = Try(identity, try_number, reattach)
    decided = plan(listed, this_try, remembered)
    if decided.intent != try_number:
        spec, body = render(decided.intent)
    name = body["metadata"]["name"]
    steps = decided.steps
    for _ in range(CREATE_ATTEMPTS):
        submitted = _carry_out(hook, steps, body, fit_check, task_log)
        if submitted is not None:
            return spec, submitted.job, submitted.created
        steps = plan_taken(hook.get_job(name, namespace), this_try)
    raise SubmissionError(
        f"The name {namespace}/{name} was taken again each time its job was created "
        f"({CREATE_ATTEMPTS} attempts); nothing was submitted."
    )


def _remembered(
    hook: VolcanoHook, ref: Mapping[str, str] | None, listed: Sequence[Mapping[str, Any]]
) -> Job | None:
    """The very job (same uid) the store names: from the list, else read by its name (its
    namespace or deployment setting changed since); None when that submission is gone."""
    if not ref:
        return None
    found = [job for job in listed if job["metadata"].get("uid") == ref["uid"]]
    job = found[0] if found else hook.get_job(ref["name"], ref["namespace"])
    return job if job is not None and job["metadata"].get("uid") == ref["uid"] else None


def _carry_out(
    hook: VolcanoHook,
    steps: Sequence[Step],
    body: dict[str, Any],
    fit_check: Callable[[VolcanoHook], None] | None,
    task_log: Any,
) -> Submitted | None:
    """Act on the plan's steps in order; None when the create found its name taken."""
    for step in steps:
        meta = (step.job or body)["metadata"]
        name, namespace, uid = meta["name"], meta["namespace"], meta.get("uid")
        if step.action in (Action.REUSE, Action.ADOPT):
            job = step.job
            if step.action is Action.ADOPT:
                job = hook.set_job_annotations(name, namespace, uid, step.annotations)
                if job is None:  # gone meanwhile: the rest of the read decides
                    return _carry_out(hook, step.if_gone, body, fit_check, task_log)
            if job is None:
                raise AssertionError("a reuse names the job it reuses")
            _say(step, task_log)
            return Submitted(dict(job), created=False)
        _say(step, task_log)
        if step.action is Action.REFUSE:
            raise SubmissionError(step.reason)
        if step.action is Action.DELETE:
            hook.delete_job(name, namespace, uid=uid)
            hook.wait_job_gone(name, namespace)
        elif step.action is Action.WAIT_GONE:
            hook.wait_job_gone(name, namespace)
        elif step.action is Action.REPLACE:
            # As read: a job changed or recreated since is not deleted (the create then
            # meets it, and it is planned on again); only a delete that took is waited on.
            if hook.delete_job(name, namespace, uid=uid, resource_version=meta["resourceVersion"]):
                hook.wait_job_gone(name, namespace)
        elif step.action is Action.CREATE:
            _wait_out_earlier_pods(hook, body["metadata"], task_log)
            if fit_check is not None:
                fit_check(hook)
            try:
                job = _create(hook, body)
            except JobExistsError:
                return None
            task_log.info("Submitted Volcano job %s/%s", namespace, job["metadata"]["name"])
            return Submitted(job, created=True)
    raise AssertionError("every plan ends in a reuse, a create or a refusal")


def _wait_out_earlier_pods(hook: VolcanoHook, meta: Mapping[str, Any], task_log: Any) -> None:
    """Let the pods of an earlier job of this name go before the name is used again.

    A job deleted in the background (``kubectl delete vcjob``'s default) is gone before its
    pods, which terminate for their grace period. Volcano's controller keys a job's pods by
    the job's name, so a job created meanwhile would count them as its own. A job that still
    holds the name keeps its pods: the create meets it, and the plan decides on it.
    """
    name, namespace = meta["name"], meta["namespace"]
    pods = _earlier_pods(hook, name, namespace)
    if not pods:
        return
    task_log.info(
        "Waiting for %d pod(s) of an earlier Volcano job named %s/%s to go before creating "
        "it again (Volcano counts a job's pods by its name): %s",
        len(pods),
        namespace,
        name,
        _pod_names(pods),
    )
    deadline = time.monotonic() + EARLIER_PODS_TIMEOUT
    while pods:
        if time.monotonic() > deadline:
            raise SubmissionError(
                f"Pods of an earlier Volcano job named {namespace}/{name} were still there "
                f"after {EARLIER_PODS_TIMEOUT:.0f} s ({_pod_names(pods)}); a job created "
                "under that name now would count them as its own. Nothing was submitted."
            )
        time.sleep(1)
        pods = _earlier_pods(hook, name, namespace)


def _earlier_pods(hook: VolcanoHook, name: str, namespace: str) -> list[dict[str, Any]]:
    """The pods labelled with the job name that no job of that name owns now."""
    pods = hook.list_job_pods(name, namespace)
    if not pods:
        return []
    held = hook.get_job(name, namespace)
    uid = held["metadata"].get("uid") if held is not None else None
    return [
        pod
        for pod in pods
        if uid is None
        or all(owner.get("uid") != uid for owner in pod["metadata"].get("ownerReferences") or [])
    ]


def _pod_names(pods: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(sorted(str(pod["metadata"]["name"]) for pod in pods))


def _say(step: Step, task_log: Any) -> None:
    for line in step.lines:
        task_log.info(line.message, *line.args)


def _create(hook: VolcanoHook, body: dict[str, Any]) -> dict[str, Any]:
    from kubernetes.client.rest import ApiException

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

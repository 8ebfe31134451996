"""Tell a person how a wait ended: fetch the job's pods, PodGroups, events and logs, explain.

The I/O edge of ``diagnostics``: it reads through ``VolcanoHook`` and lets the pure module
explain. Diagnostics are a courtesy: every function here is best-effort, so a failing read
(a pod already gone, a Role without ``events``) shortens the report, never changes the task's
outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.airflow_compat import redact
from airflow_volcano_wandb.exceptions import VolcanoJobError
from airflow_volcano_wandb.job import gpu_usage
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.job_status import interpret
from airflow_volcano_wandb.job.job_view import JobView
from airflow_volcano_wandb.job.ownership import REPORTED_ANNOTATION
from airflow_volcano_wandb.wait import diagnostics, failure_exception
from airflow_volcano_wandb.wait.judge import gang_whole_since
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.restart_budget import job_pods, rank_of

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

#: Lines of each rank's log in a stall's exception (the task log shows ``log_lines`` of each).
STALL_MESSAGE_LINES = 3

log = logging.getLogger(__name__)


def _read_around(
    hook: VolcanoHook, result: WaitResult, job: Mapping[str, Any] | None, *, podgroups: bool = False
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The pods of the job ``result`` names (``job``: as last read, ``None`` once deleted), its
    PodGroups (``podgroups``: asked for) and the events about any of them and the job."""
    job = job or {"metadata": {"name": result.job_name, "namespace": result.namespace}}
    meta = job["metadata"]
    pods = hook.list_job_pods(meta["name"], meta["namespace"])
    groups = hook.list_podgroups(meta["namespace"], meta.get("uid", "")) if podgroups else []
    names = {str(meta.get("name", ""))} | diagnostics.pod_names(job)
    names |= {obj["metadata"]["name"] for obj in (*pods, *groups)}
    return pods, groups, hook.list_events(meta["namespace"], names)


def explain_end(
    hook: VolcanoHook,
    result: WaitResult,
    job: Mapping[str, Any] | None,
    log_lines: int,
    task_log: logging.Logger | Any,
) -> tuple[str, diagnostics.Classification | None]:
    """The message a failed wait raises with, and what caused it (``None``: the outcome alone
    decides the exception); the full report goes to ``task_log``. ``job``: as last read
    (``None`` once deleted). A report that cannot be fetched raises: :func:`report_failure`
    logs it as such and fails with the outcome's message alone.
    """
    message = result.message
    if result.outcome is Ending.CRASH_LOOP:
        last_words = _report_crash_loop(hook, result, job, log_lines, task_log)
        if last_words:
            message += f"; its last log line before the restart: {last_words}"
        return message, None  # the verdict names the container: nothing to classify
    if result.outcome is Ending.STALLED:
        return message + _report_stall(hook, result, log_lines, task_log), None
    if result.outcome is Ending.START_FAILED:
        _report_start_failure(hook, result, job, task_log)
        return message, None  # the verdict names the container and its image
    if job is None or not result.outcome.row.reads_pods:
        return message, None
    pods, podgroups, events = _read_around(hook, result, job, podgroups=True)
    never_started = result.outcome is Ending.PENDING_TIMEOUT
    cause = diagnostics.classify(job, pods, events, never_started=never_started)
    if never_started:
        if cause.failure is not None:  # placed, but its image cannot be pulled
            return f"{message}: {cause.failure.describe()}", cause
        reason = diagnostics.unschedulable_reason(podgroups, events)
        return f"{message}: {reason or 'Volcano gave no reason'}", cause
    master = diagnostics.master_pod(pods, job)
    failures = diagnostics.container_failures(pods, diagnostics.task_of(master or {}) or None)
    logs = {
        name: _masked_pod_log(hook, name, job["metadata"]["namespace"], log_lines)
        for name in diagnostics.pods_worth_a_log(failures, master)
    }
    report = diagnostics.failure_report(failures, logs, events, log_lines)
    for line in report:
        task_log.error("%s", line)
    first = cause.failure.describe() if cause.failure is not None else None
    if first or report:
        message += f"; first cause: {first or report[0]}"
    return message, cause


def _report_crash_loop(
    hook: VolcanoHook,
    result: WaitResult,
    job: Mapping[str, Any] | None,
    log_lines: int,
    task_log: Any,
) -> str:
    """Log the crash loop: the crash-looping container's failure, its log from before its
    last restart (``previous=True``: the running one has only just started again) and the
    job's warning events; return that log's last line (masked), or ``""``. Best-effort, like
    every report."""
    loop = result.crash_loop
    if loop is None:
        return ""
    try:
        pods, _, events = _read_around(hook, result, job)
        failures = [f for f in diagnostics.container_failures(pods) if f.pod == loop.pod]
        previous = hook.read_pod_log(
            loop.pod, result.namespace, log_lines, container=loop.container, previous=True
        )
        previous = str(redact(previous))
        title = f"{loop.pod} container {loop.container} before its last restart"
        for line in diagnostics.failure_report(failures, {title: previous}, events, log_lines):
            task_log.error("%s", line)
    except Exception as exc:
        task_log.warning("Could not gather the crash loop's diagnostics (%s)", exc)
        return ""
    lines = [line for line in previous.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _report_start_failure(
    hook: VolcanoHook,
    result: WaitResult,
    job: Mapping[str, Any] | None,
    task_log: logging.Logger | Any,
) -> None:
    """Log the job's warning events (the kubelet's pull errors, a missing Secret): the
    container never ran, so there is no log to show. Best-effort, like every report."""
    try:
        _, _, events = _read_around(hook, result, job)
    except Exception as exc:
        task_log.warning("Could not read the events of the job that cannot start (%s)", exc)
        return
    for line in diagnostics.failure_report([], {}, events, 0):
        task_log.error("%s", line)


def _report_stall(
    hook: VolcanoHook, result: WaitResult, log_lines: int, task_log: logging.Logger | Any
) -> str:
    """Log every rank's log tail (masked): where a hung collective stopped shows in the last
    lines of each rank. Return the last :data:`STALL_MESSAGE_LINES` of each, for the
    exception, or ``""``. Best-effort, like every report."""
    try:
        pods = job_pods(
            hook.list_job_pods(result.job_name, result.namespace), result.job_uid or None
        )
        names = sorted(pod["metadata"]["name"] for pod in pods)
        logs = {name: _masked_pod_log(hook, name, result.namespace, log_lines) for name in names}
    except Exception as exc:
        task_log.warning("Could not read the ranks' logs of the stalled job (%s)", exc)
        return ""
    for line in diagnostics.failure_report([], logs, [], log_lines):
        task_log.error("%s", line)
    last = [
        f"    [{rank_of(name, result.job_name)}] {line}"
        for name, text in logs.items()
        for line in (diagnostics.tail(text, STALL_MESSAGE_LINES).splitlines() or ["(no lines)"])
    ]
    return "; the last log lines of each rank:\n" + "\n".join(last) if last else ""


def report_failure(
    hook: VolcanoHook,
    result: WaitResult,
    *,
    delete_job: Callable[[], None] | None,
    log_lines: int,
    task_log: logging.Logger | Any,
    run_url: str | None = None,
) -> VolcanoJobError:
    """Clean up after a failed wait, then explain it: the exception to fail the task with
    (its class names the cause, see ``exceptions``; ``run_url``, the job's W&B run, is named
    for a run stopped from W&B: its page says who stopped it).

    ``delete_job`` (when the cleanup rule says the job goes) runs *before* the diagnostics
    for a timeout (nothing to read), else right *after* them, since the pods' logs and events
    are the report; it runs even if the diagnostics fail.
    """
    delete_first = result.outcome is Ending.TIMEOUT  # the one that deletes with no report
    if delete_job is not None and delete_first:
        delete_job()
    try:
        job = None
        if result.outcome.row.known and result.job_uid:
            job = hook.get_job(result.job_name, result.namespace)
            if job is not None and job["metadata"].get("uid") != result.job_uid:
                job = None
        message, cause = explain_end(hook, result, job, log_lines, task_log)
    except Exception as exc:
        task_log.warning("Could not gather the job's diagnostics (%s)", exc)
        message, cause = result.message, None
    finally:
        if delete_job is not None and not delete_first:
            delete_job()
    error = failure_exception.for_failure(result, message, cause, run_url=run_url)
    task_log.info("Failing with %s", type(error).__name__)
    return error


def ended_meanwhile(
    hook: VolcanoHook, job: Mapping[str, str], task_log: logging.Logger | Any = log
) -> WaitResult | None:
    """For a wait that ran out of time: the job's own end, if the apiserver shows one now (a
    job that completed unseen during a watch outage did not time out); ``None`` when it still
    runs, is gone or another submission, or cannot be read: then the timeout stands."""
    try:
        current = hook.get_job(job["name"], job["namespace"])
    except Exception as exc:
        task_log.warning("Could not read job %s once the wait timed out (%s)", job["name"], exc)
        return None
    if current is None or (job.get("uid") and current["metadata"].get("uid") != job["uid"]):
        return None
    status = interpret(current)
    if status.ending in (None, Ending.DELETED):
        return None
    task_log.info("The wait timed out, but the job has ended: %s", status.explain())
    return WaitResult.from_status(status)


def fetch_finished_job(
    hook: VolcanoHook,
    result: WaitResult,
    task_log: logging.Logger | Any,
    patched: dict[str, Any] | None = None,
) -> dict[str, Any] | None:
    """The finished job as it is now, for its log tail and its facts: ``patched`` (the
    answer to :func:`mark_reported`'s patch, just now) when given, else read; ``None`` (with a
    warning) when it cannot be read: the job succeeded, so reading it may not fail the task."""
    if patched is not None:
        return patched
    try:
        return hook.get_job(result.job_name, result.namespace)
    except Exception as exc:
        task_log.warning("Could not read job %s after it succeeded (%s)", result.job_name, exc)
        return None


def _masked_pod_log(hook: VolcanoHook, pod: str, namespace: str, log_lines: int) -> str:
    """A pod's log tail with every secret this process knows masked before it is logged: a
    task's log records also travel outside its masked log file (Airflow's supervisor can copy
    them to stdout), and a trainer may print its environment, API key included."""
    return str(redact(hook.read_pod_log(pod, namespace, log_lines)))


def finished_job_pods(
    hook: VolcanoHook, job: Mapping[str, Any] | None, task_log: Any
) -> list[dict[str, Any]] | None:
    """The finished job's pods, read once for its GPU-seconds and its master's log tail;
    ``None`` (with a warning) when there is no job or they cannot be read (a report, never a
    reason to fail)."""
    if job is None:
        return None
    meta = job["metadata"]
    try:
        return hook.list_job_pods(meta["name"], meta["namespace"])
    except Exception as exc:
        task_log.warning("Could not read the job's pods for its report (%s)", exc)
        return None


def log_master_tail(
    hook: VolcanoHook,
    job: Mapping[str, Any] | None,
    log_lines: int,
    task_log: Any,
    pods: list[dict[str, Any]] | None = None,
) -> None:
    """Show the master's last log lines (deferrable mode streams nothing while waiting);
    ``pods``: the job's pods as :func:`finished_job_pods` read them (else they are read)."""
    if job is None:
        return
    meta = job["metadata"]
    try:
        if pods is None:
            pods = hook.list_job_pods(meta["name"], meta["namespace"])
        master = diagnostics.master_pod(pods, job)
        if master is None:
            return
        pod_name = master["metadata"]["name"]
        for line in _masked_pod_log(hook, pod_name, meta["namespace"], log_lines).splitlines():
            task_log.info("[%s] %s", pod_name, line)
    except Exception as exc:
        task_log.warning("Could not read the master's log (%s)", exc)


#: The XCom of a succeeded task with its job's GPU-seconds per rank.
XCOM_GPU_SECONDS = "gpu_seconds"


def log_gpu_seconds(
    job: Mapping[str, Any], pods: list[dict[str, Any]], task_log: Any
) -> dict[str, float]:
    """The finished job's GPU-seconds per rank (``gpu_usage``) from its ``pods`` (as
    :func:`finished_job_pods` read them), logged."""
    removed = gpu_usage.removed_ranks(job, pods)
    ran = gpu_usage.ran_between(gang_whole_since(job), JobView.of(job).transition_time)
    usage = gpu_usage.gpu_seconds(pods, job["metadata"]["name"], time.time(), removed, ran)
    task_log.info("%s", gpu_usage.describe(usage))
    if removed:
        task_log.info(
            "%s: Volcano removed their pods when the job ended; %s",
            ", ".join(removed),
            "counted from when the gang was whole to the job's end (they started no later)"
            if ran is not None
            else "not counted (the gang was never seen whole, so when they started is unknown)",
        )
    return usage


def mark_reported(
    hook: VolcanoHook, result: WaitResult, try_number: int, task_log: logging.Logger | Any
) -> dict[str, Any] | None:
    """Record on the job that ``try_number`` reported its outcome (best-effort): a later try
    (a cleared task) then submits afresh instead of counting it. The job as the apiserver
    answered the uid-guarded patch, or ``None`` when nothing was patched (a lost watch is no
    outcome of the job, and a deleted job has nothing to mark)."""
    if not result.outcome.row.known or result.outcome is Ending.DELETED or not result.job_uid:
        return None
    try:
        return hook.set_job_annotations(
            result.job_name,
            result.namespace,
            result.job_uid,
            {REPORTED_ANNOTATION: str(try_number)},
        )
    except Exception as exc:
        task_log.warning("Could not mark job %s as reported (%s)", result.job_name, exc)
        return None

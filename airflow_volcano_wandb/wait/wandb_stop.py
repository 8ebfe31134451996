"""A W&B run stopped from the W&B UI or API, as the job's pods show it.

Pure. The seed cancels a training by stopping its run in W&B: the trainer's W&B client (on
the ranks that run W&B) finishes the run and exits with :data:`STOPPED_FROM_WANDB_EXIT_CODE`
(docs/trainer.md).

Under the seed's ``restartPolicy: OnFailure`` the kubelet restarts the stopped trainer in its
pod, so neither the pod nor the job fails: the waiter finds the stop in the pods it reads
(``step_io``), as a container's current or last termination; a template whose failed pod ends
the job shows it in ``diagnostics.classify``. A trainer that misses the stop would train on, so
the wait, like W&B Launch's agent, also asks W&B (``wandb_progress``), at most every
:func:`ask_interval`: the first waiter to hear it marks the job (:data:`STOP_SEEN_ANNOTATION`:
a restart or handover counts from the same moment), and a job still running
``wandb_stop_grace`` later is deleted (:func:`describe_unheeded`). The task fails with
``StoppedFromWandbError`` either way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from airflow_volcano_wandb.job.job_view import ObjectMeta, api_timestamp, epoch_seconds
from airflow_volcano_wandb.job.ownership import DOMAIN
from airflow_volcano_wandb.wait.restart_budget import job_pods, rank_of

#: The exit code of a trainer whose W&B run was stopped from the W&B UI or API. Kept equal to
#: ``STOPPED_FROM_WANDB_EXIT_CODE`` in ``docker/trainer/train.py`` (tests/trainer checks it);
#: it is none of Python's, the shell's, a signal's (128+N) or the sysexits range (64-78).
STOPPED_FROM_WANDB_EXIT_CODE = 86

#: What the trainer also writes as its container's termination message, kept equal to
#: ``docker/trainer/train.py``'s: under ``torchrun`` the container exits with ``torchrun``'s
#: code, and only the message still tells a stop.
STOPPED_FROM_WANDB_MARKER = "avw-stopped-from-wandb"

#: What the task log and the exception say about who stopped the run: the W&B client is told
#: only *that* the run was stopped, not by whom (the run's page in W&B shows that).
STOPPED_BY = "stopped from the W&B UI or API"

#: How long a trainer has, by default, to end its job after its W&B run was stopped.
DEFAULT_WANDB_STOP_GRACE = 60.0
#: At most this often a waiter asks W&B whether the run was stopped (once a minute per running
#: job, as W&B Launch's agent does), or every ``wandb_stop_grace`` when that is shorter.
WANDB_STOP_CHECK_INTERVAL = 60.0
#: When a waiter first heard from W&B that the job's run was stopped (UTC, ISO 8601).
STOP_SEEN_ANNOTATION = f"{DOMAIN}/wandb-stop-seen-at"


def stopped_rank(
    pods: Iterable[Mapping[str, Any]], *, job_name: str, job_uid: str | None = None
) -> str | None:
    """The first rank (``master-0``, by pod name) of the live pods of ``job_uid`` (``None``:
    every pod given) whose container ended as a stopped run's (:func:`is_stop`), now or before
    its last restart; ``None`` when none did."""
    for pod in sorted(job_pods(pods, job_uid), key=lambda p: ObjectMeta.of(p).name):
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            for state in (status.get("state"), status.get("lastState")):
                terminated = (state or {}).get("terminated") or {}
                if is_stop(terminated.get("exitCode"), terminated.get("message")):
                    return rank_of(ObjectMeta.of(pod).name, job_name)
    return None


def is_stop(exit_code: int | None, message: str | None) -> bool:
    """Whether a container that ended with ``exit_code`` and termination ``message`` is a
    trainer whose W&B run was stopped."""
    stop_marked = (message or "").startswith(STOPPED_FROM_WANDB_MARKER)
    return exit_code == STOPPED_FROM_WANDB_EXIT_CODE or stop_marked


def describe(namespace: str, name: str, rank: str) -> str:
    """The sentence a wait ended by a stop ends with."""
    return (
        f"Volcano job {namespace}/{name} was {STOPPED_BY}: rank {rank}'s trainer ended as a "
        f"stopped W&B run's does (exit code {STOPPED_FROM_WANDB_EXIT_CODE}, or "
        f"{STOPPED_FROM_WANDB_MARKER!r} as its termination message under torchrun)"
    )


def ask_interval(grace: float) -> float:
    """How often a waiter holding a job to ``grace`` asks W&B whether its run was stopped."""
    return min(WANDB_STOP_CHECK_INTERVAL, grace)


def stop_seen_mark(now: float) -> dict[str, str]:
    """The annotation that records the stop heard from W&B at ``now`` (epoch seconds)."""
    return {STOP_SEEN_ANNOTATION: api_timestamp(now)}


def stop_seen_at(job: Mapping[str, Any]) -> float | None:
    """When a waiter first heard of the job's run stopped (epoch seconds); ``None``: never, or
    a mark no waiter wrote (not a timestamp), which the next waiter to hear the stop rewrites."""
    try:
        return epoch_seconds(ObjectMeta.of(job).annotations.get(STOP_SEEN_ANNOTATION))
    except ValueError:
        return None


def describe_unheeded(namespace: str, name: str, run_id: str, grace: float) -> str:
    """The sentence a wait ended by a stop the trainer did not act on ends with."""
    return (
        f"Volcano job {namespace}/{name} was {STOPPED_BY}: W&B run {run_id} was marked "
        f"stopped, but the trainer did not stop by itself within wandb_stop_grace={grace:g}s, "
        "so the job was deleted (a trainer that stops itself exits with code "
        f"{STOPPED_FROM_WANDB_EXIT_CODE}: docs/trainer.md)"
    )

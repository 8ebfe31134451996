"""The stall timeout: a running job whose master has printed nothing for too long.

Pure. A hung collective or a deadlocked data loader leaves every pod ``Running`` and the job
with it, holding its GPUs until ``execution_timeout``. A trainer that makes progress prints
(a loss, a step, a progress bar), so a master silent for ``stall_timeout`` is taken as stalled.

The question is asked of the apiserver, not of a waiter's memory, so a triggerer restart or a
handover changes nothing: the master container has run for at least ``stall_timeout`` (its
``state.running.startedAt``), and its log since then is empty (one
``GET pods/<master>/log?sinceSeconds=...&limitBytes=1``), asked at most once per
``stall_timeout / PROBES_PER_TIMEOUT``. A trainer may log only to W&B: a silent master whose
online run logged a step within ``stall_timeout`` is not stalled (:func:`stalled_online`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.job.job_view import ObjectMeta, api_timestamp, epoch_seconds
from airflow_volcano_wandb.wait.diagnostics import master_pod
from airflow_volcano_wandb.wait.restart_budget import RankContainer, job_pods, rank_of
from airflow_volcano_wandb.wandb.numbers import finite_number

#: How many probes of the master's log a waiter makes per ``stall_timeout`` at most: a stall
#: is seen within ``stall_timeout * (1 + 1 / PROBES_PER_TIMEOUT)`` of the master's last line.
PROBES_PER_TIMEOUT = 4


@dataclass(frozen=True)
class Stall(RankContainer):
    """The master container, running for ``running_for`` seconds; stalled when its log of the
    last ``stall_timeout`` seconds is empty (:func:`stalled`) and, when W&B was asked, its
    run's last step (``wandb_step``, logged at ``wandb_logged_at``, epoch seconds) is older
    (:func:`stalled_online`)."""

    stall_timeout: float
    running_for: float
    wandb_step: int | None = None
    wandb_logged_at: float | None = None

    @property
    def since_seconds(self) -> int:
        """The log's ``sinceSeconds``: whole seconds, not less than the timeout (nor 1)."""
        return max(1, math.ceil(self.stall_timeout))

    def describe(self) -> str:
        """One sentence for the task log and the exception."""
        silent = (
            f"the master (rank {self.rank}, pod {self.pod}, container {self.container}) has "
            f"printed no log line for at least {self.stall_timeout:g}s, past "
            f"stall_timeout={self.stall_timeout:g} (it has run for {self.running_for:.0f}s)"
        )
        if self.wandb_logged_at is None:
            return silent
        step = "" if self.wandb_step is None else f", {self.wandb_step},"
        return (
            f"{silent}; its W&B run's last step{step} was logged at "
            f"{api_timestamp(self.wandb_logged_at)}, more than stall_timeout ago too"
        )


@dataclass(frozen=True)
class WandbStep:
    """A W&B run's last step as its summary tells: ``_step`` (``None``: not told), logged at
    ``_timestamp`` (epoch seconds, the trainer's clock at its last ``wandb.log``)."""

    step: int | None
    logged_at: float

    @classmethod
    def of_summary(cls, summary: Mapping[str, Any]) -> WandbStep | None:
        """The last step of a run ``summary``; ``None`` when it has logged none."""
        logged_at = finite_number(summary.get("_timestamp"), float)
        if logged_at is None:
            return None
        return cls(finite_number(summary.get("_step"), int), logged_at)


def probe_due(stall_timeout: float | None, probed_at: float | None, now: float) -> bool:
    """Whether a waiter that last probed at ``probed_at`` (``None``: never, or forgotten)
    probes the master's log now; never without a ``stall_timeout``."""
    if stall_timeout is None:
        return False
    return probed_at is None or now - probed_at >= stall_timeout / PROBES_PER_TIMEOUT


def silence_probe(
    job: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    stall_timeout: float,
    now: float,
    job_uid: str | None = None,
) -> Stall | None:
    """The master container whose log to probe: the first container of the master pod of
    this submission (``job_uid``, among ``pods`` read after ``job``), running for at least
    ``stall_timeout``; ``None`` when there is none (not started, restarted or replaced lately,
    being deleted): nothing to judge yet."""
    master = master_pod(job_pods(pods, job_uid), job)
    if master is None:
        return None
    containers = (master.get("spec") or {}).get("containers") or []
    if not containers:
        return None
    container = str(containers[0].get("name") or "")
    statuses = (master.get("status") or {}).get("containerStatuses") or []
    status: dict[str, Any] = next((s for s in statuses if s.get("name") == container), {})
    started = ((status.get("state") or {}).get("running") or {}).get("startedAt")
    if not started:
        return None
    running_for = now - (epoch_seconds(started) or now)
    if running_for < stall_timeout:
        return None
    pod = str(master["metadata"]["name"])
    return Stall(pod, rank_of(pod, ObjectMeta.of(job).name), container, stall_timeout, running_for)


def stalled(probe: Stall, log_since: str) -> Stall | None:
    """The stall, when the probed container's log since ``probe.since_seconds`` ago is empty
    (even an empty line is a line: a newline)."""
    return probe if log_since == "" else None


def stalled_online(stall: Stall, last_step: WandbStep | None, now: float) -> Stall | None:
    """The verdict on a master whose log found ``stall``, once its W&B run was asked.

    ``None`` (progress: not stalled) when the run logged its ``last_step`` within
    ``stall_timeout`` of ``now``; the stall, naming that step, when it logged it earlier;
    the log's verdict alone (``stall`` as it is) when W&B could not say (``None``).
    """
    if last_step is None:
        return stall
    if last_step.logged_at > now - stall.stall_timeout:
        return None
    return dataclasses.replace(
        stall, wandb_step=last_step.step, wandb_logged_at=last_step.logged_at
    )

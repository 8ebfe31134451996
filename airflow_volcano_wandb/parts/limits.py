"""How often a job's containers may restart in place, how long its master may stay silent,
how long a placed container may fail to start and how long a job may outlive its stopped W&B
run, before the task gives up on it; and a limit's seconds as a template renders them."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from airflow_volcano_wandb.parts.options import option
from airflow_volcano_wandb.wait.restart_budget import DEFAULT_MAX_CONTAINER_RESTARTS
from airflow_volcano_wandb.wait.startup import DEFAULT_STARTUP_TIMEOUT
from airflow_volcano_wandb.wait.wandb_stop import DEFAULT_WANDB_STOP_GRACE


def _check_budget(budget: Any) -> None:
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int)):
        raise TypeError(f"max_container_restarts must be an int or None, not {budget!r}")
    if budget is not None and budget < 0:
        raise ValueError(f"max_container_restarts must be 0 or more, not {budget}")


def _seconds_check(name: str) -> Any:
    def check(seconds: Any) -> None:
        if seconds is None:
            return
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise TypeError(f"{name} must be seconds or None, not {seconds!r}")
        if not seconds > 0:
            raise ValueError(f"{name} must be more than 0 seconds, not {seconds}")

    return check


@dataclass(frozen=True, kw_only=True)
class RunLimits:
    """The operator's and the sensor's limits on a job that holds its GPUs without training:
    the restart budget, the stall and startup timeouts (``wait/restart_budget.py``,
    ``wait/stall.py``, ``wait/startup.py``) and the grace of a run stopped from W&B."""

    max_container_restarts: int | None = option(
        DEFAULT_MAX_CONTAINER_RESTARTS,
        """past this many restarts (every container of every live pod, over all ranks) the
        task fails with ``TrainerCrashLoopError`` (naming the rank, the container and its last
        exit code and reason; the log of the container before its restart is in the task log)
        and the job is deleted, once a fresh read of the job and its pods confirms it. ``0``:
        the first restart fails the task; ``None``: restarts are not counted. The default, 3,
        fails a rank that crashes at every start within minutes (the kubelet waits 10 s, 20 s,
        40 s, 80 s between its restarts) and lets a small gang recover from one crash of each
        rank.""",
        check=_check_budget,
    )
    stall_timeout: float | None = option(
        None,
        """seconds a running job's master (rank 0, its first container) may print no log
        line: past them the task fails with ``TrainingStalledError`` (its message ends with
        every rank's last log lines) and the job is deleted, once a fresh read of the job
        (still ``Running``) and a second probe of the master's log confirm it. The wait probes
        at most every ``stall_timeout / 4`` (one pod LIST and one ``sinceSeconds`` log read of
        one byte). When the W&B run is online and ``wandb_conn_id`` has a key and a project, a
        silent master's run is asked too (its summary's ``_step`` and ``_timestamp``, under a
        deadline): a step logged within ``stall_timeout`` is progress (a trainer that logs only
        to W&B), an older one is named in the error; when W&B cannot say, the log alone
        judges. Set it well above the trainer's longest quiet stretch (checkpointing,
        evaluation, a first data load). ``None`` (default): off.""",
        check=_seconds_check("stall_timeout"),
    )
    startup_timeout: float | None = option(
        DEFAULT_STARTUP_TIMEOUT,
        """seconds a placed rank's container may keep failing to start before the task fails
        and the job is deleted, so every rank releases its GPUs (``KubernetesPodOperator``'s
        ``startup_timeout_seconds``). It counts from when the pod was placed on its node, its
        container last ended or this try's wait began, whichever is latest; never while the
        gang queues for GPUs: that is ``pending_timeout``'s. An image that cannot be pulled
        (``ErrImagePull``, ``ImagePullBackOff``) fails with ``ImagePullError``, a missing
        Secret or ConfigMap key (``CreateContainerConfigError``) with
        ``ContainerConfigError``, after this many seconds; an image reference the kubelet can
        never pull (``InvalidImageName``, ``ErrImageNeverPull``) at once. A slow pull of a
        large image (``ContainerCreating``) is not a failure. The message names the pod, the
        image and the kubelet's words; the verdict is confirmed by a fresh read of the job and
        its pods first. While a rank has not started, the wait reads the job's pods (one LIST
        per ``pod_check_interval``). ``None``: not looked for.""",
        check=_seconds_check("startup_timeout"),
    )

    wandb_stop_grace: float | None = option(
        DEFAULT_WANDB_STOP_GRACE,
        """seconds a job may go on running after its W&B run was stopped from the W&B UI or
        API: past them the job is deleted and the task fails with ``StoppedFromWandbError``,
        saying that the trainer did not stop by itself. A trainer that sees the stop ends
        sooner (exit code 86, docs/trainer.md); this is for one that misses it, as W&B
        Launch's agent ends such a run itself. The wait asks W&B whether the run was stopped
        (its ``RunStoppedStatus``, as Launch's agent does) once a minute at most, or every
        ``wandb_stop_grace`` when shorter, for an online run whose ``wandb_conn_id`` has a
        key and a project; the first waiter to hear it marks the job, and the job goes once a
        fresh read shows it still running that long after the mark and W&B says so again.
        ``None``: W&B is not asked (the trainer alone ends a stopped run).""",
        check=_seconds_check("wandb_stop_grace"),
    )

    @property
    def asks_wandb(self) -> bool:
        """Whether the wait asks the job's online W&B run anything (its last step for the
        stall timeout, whether it was stopped)."""
        return self.stall_timeout is not None or self.wandb_stop_grace is not None

    def trigger_kwargs(self) -> dict[str, Any]:
        """The limits, as the trigger (``WaitSpec``) and ``JobTarget`` take them."""
        return asdict(self)


def templated_seconds(value: float | str | None, name: str) -> float | None:
    """A templated duration (the Trigger form sends text) as seconds; ``name`` is the
    parameter, named when the value is no number of 0 or more."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if isinstance(value, bool) or not seconds >= 0:
        raise ValueError(f"{name} must be in seconds (0 or more), not {value!r}")
    return seconds

"""The exceptions a failed Volcano job raises, one class per cause, for Airflow retry policies.

Every class is an ``AirflowException`` (the timeout is also an ``AirflowTaskTimeout``), so code
that catches ``AirflowException`` keeps working; an Airflow 3.3 ``ExceptionRetryPolicy`` can
match the cause instead of the message, e.g. retry a preempted job after a delay but fail an
out-of-memory one at once (see ``dags/volcano_pytorch_retraining.py`` and docs/reliability.md).

What caused a failure is decided by ``wait.diagnostics.classify`` (pure) from the job, its pods
and events; ``wait.failure_exception.for_failure`` turns that into the exception to raise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_volcano_wandb.airflow_compat import (
    AirflowException,
    AirflowFailException,
    AirflowTaskTimeout,
)


class VolcanoJobError(AirflowException):
    """A Volcano job of this task did not succeed; the base of every class below.

    :param message: what happened, as the task log shows it.
    :param job: the job as ``{"name", "namespace", "uid"}`` (the ``volcano_job`` XCom), when
        one exists.
    """

    def __init__(self, message: str, *, job: Mapping[str, str] | None = None) -> None:
        super().__init__(message)
        self.job = dict(job) if job else None


class ContainerError(VolcanoJobError):
    """A failure that one container of one rank explains (which pod, task and container).

    :param pod: the pod's name.
    :param task: the Volcano task (``master``, ``worker``...).
    :param container: the container's name.
    :param reason: the kubelet's reason (``OOMKilled``, ``Error``, ``ErrImagePull``...).
    :param exit_code: the container's exit code, when it exited.
    """

    def __init__(
        self,
        message: str,
        *,
        job: Mapping[str, str] | None = None,
        pod: str = "",
        task: str = "",
        container: str = "",
        reason: str = "",
        exit_code: int | None = None,
    ) -> None:
        super().__init__(message, job=job)
        self.pod, self.task, self.container, self.reason = pod, task, container, reason
        self.exit_code = exit_code


class JobUnschedulableError(VolcanoJobError):
    """The gang was not wholly placed and running within ``pending_timeout`` (not enough GPUs,
    a full queue): retrying at once rarely helps."""


class JobPreemptedError(ContainerError):
    """A rank was preempted by the scheduler or evicted from its node: worth a retry later."""


class ImagePullError(ContainerError):
    """A rank's image could not be pulled (a wrong ``image_uri`` or pull secret)."""


class OOMKilledError(ContainerError):
    """A rank's container was killed for running out of memory."""


class TrainerExitError(ContainerError):
    """The training process of a rank exited with a non-zero code (``exit_code``, ``task``,
    ``pod`` say which)."""


class TrainerCrashLoopError(ContainerError):
    """A rank's container kept crashing and restarting in place (``restartPolicy: OnFailure``)
    until the job's restarts passed ``max_container_restarts``; the job is deleted.

    ``task``, ``pod``, ``container``, ``exit_code`` and ``reason`` are the crash-looping
    container's and its last exit's; ``restarts`` is the count over all ranks.
    """

    def __init__(self, message: str, *, restarts: int = 0, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.restarts = restarts


class StoppedFromWandbError(AirflowFailException, ContainerError):
    """The job's W&B run was stopped from the W&B UI or API (the seed's way to cancel a
    training): a rank's trainer exited with the stop code (``wait.wandb_stop``, docs/trainer.md);
    the job is deleted.

    An ``AirflowFailException``, so the task fails without a retry whatever ``retries`` or a
    retry policy say: a retry would start again what a person chose to stop (clear the task to
    train again). ``task``, ``pod``, ``container`` and ``exit_code`` name the stopped rank
    when its pod could still be read.
    """


class TrainingStalledError(ContainerError):
    """The job ran, but its master printed no log line for ``stall_timeout`` seconds (a hung
    collective, a deadlocked data loader); the job is deleted. The message ends with every
    rank's last log lines.

    ``task``, ``pod`` and ``container`` are the master's; ``stall_timeout`` the limit it
    passed; ``running_for`` how long its container had run when the stall was confirmed.
    When the job's online W&B run was asked too, ``wandb_step`` is its last step and
    ``wandb_logged_at`` when it was logged (epoch seconds); else ``None``.
    """

    def __init__(
        self,
        message: str,
        *,
        stall_timeout: float = 0.0,
        running_for: float = 0.0,
        wandb_step: int | None = None,
        wandb_logged_at: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(message, **kwargs)
        self.stall_timeout, self.running_for = stall_timeout, running_for
        self.wandb_step, self.wandb_logged_at = wandb_step, wandb_logged_at


class JobFailedError(VolcanoJobError):
    """Volcano ended the job badly (``Failed``, ``Terminated``, ``Aborted``) for a cause no pod
    shows any more (e.g. a policy acting on a pod that is gone)."""


class JobRefusedError(VolcanoJobError):
    """Kubernetes refused to create the job (an admission webhook, validation, a missing
    permission: a 4xx answer); nothing was submitted and the same request will fail again."""


class JobWontFitError(JobRefusedError):
    """The job can never be placed (``job.fit``): its gang asks more than its Volcano queue's
    capability, or more than the nodes have; it failed before anything was submitted, and the
    same request will fail again. The message names the resource and the numbers."""


class ApiserverUnreachableError(VolcanoJobError):
    """The Kubernetes API could not be reached, or watched for longer than
    ``watch_failure_grace``. The job was left alone: a retry reattaches to it."""


class JobDeletedError(VolcanoJobError):
    """The job was deleted (or replaced) by someone else while this task waited on it."""


class JobTimeoutError(AirflowTaskTimeout, VolcanoJobError):
    """The task's ``execution_timeout`` was reached while the job ran (the job is deleted)."""

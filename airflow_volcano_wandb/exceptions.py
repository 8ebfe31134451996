"""The exceptions a failed Volcano job raises, one class per cause, for Airflow retry policies.

Every class is an ``AirflowException`` (the timeout also an ``AirflowTaskTimeout``); an Airflow
3.3 ``ExceptionRetryPolicy`` can match the cause instead of the message, e.g. retry a preempted
job after a delay but fail an out-of-memory one at once (docs/reliability.md). Each ending of a
wait is a row of ``job.endings`` that names its class (``wait.failure_exception``), and each
class names the cause the next try is told (``resume_cause``: whether it resumes the W&B run).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from airflow_volcano_wandb.airflow_compat import (
    AirflowException,
    AirflowFailException,
    AirflowTaskTimeout,
)

#: The causes a try can end by, as ``resume_on`` names them (``job.resume``).
PREEMPTED = "preempted"  # a rank preempted or evicted (node pressure, a drain, a lost node)
KILLED = "killed"  # the task was killed (marked failed, cleared, a SIGTERM): the job deleted
DELETED = "deleted"  # someone else deleted the job while the task waited on it
TIMEOUT = "timeout"  # the task's execution_timeout
TRAINER_FAILURE = "trainer_failure"  # an exit code, OOM, crash loop, stall, a failed job
STOPPED_FROM_WANDB = "stopped_from_wandb"  # never resumed: the user stopped the run
NOT_STARTED = "not_started"  # the gang was never placed: nothing to resume
SUCCEEDED = "succeeded"  # a cleared successful task trains afresh
UNKNOWN = "unknown"  # the watch was lost: the next try reattaches or starts afresh


class VolcanoJobError(AirflowException):
    """A Volcano job of this task did not succeed; the base of every class below.

    :param message: what happened, as the task log shows it.
    :param job: the job as ``{"name", "namespace", "uid"}`` (the ``volcano_job`` XCom), when
        one exists.
    """

    #: The cause a try that fails with this ended by (one of the names above). Every class a
    #: failed wait raises (``for_failure``) names its own; the base's is a failure of the job.
    resume_cause: ClassVar[str] = TRAINER_FAILURE

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

    resume_cause = NOT_STARTED


class JobPreemptedError(ContainerError):
    """A rank was preempted by the scheduler or evicted from its node: worth a retry later."""

    resume_cause = PREEMPTED


class ContainerStartError(ContainerError):
    """A placed rank's container cannot start (the kubelet says why in ``reason``); the base
    of the two causes below. The job is deleted, so every rank releases its GPUs.

    :param image: the image the container's spec asks for.
    """

    resume_cause = NOT_STARTED

    def __init__(self, message: str, *, image: str = "", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.image = image


class ImagePullError(ContainerStartError):
    """A rank's image cannot be pulled (a wrong ``image_uri``, tag or pull secret:
    ``ErrImagePull``, ``ImagePullBackOff``) or is no image reference (``InvalidImageName``)."""

    resume_cause = NOT_STARTED


class ContainerConfigError(ContainerStartError):
    """A rank's container cannot be created as configured (``CreateContainerConfigError``,
    ``CreateContainerError``): a Secret or ConfigMap, or a key of one, that it needs is
    missing."""

    resume_cause = NOT_STARTED


class OOMKilledError(ContainerError):
    """A rank's container was killed for running out of memory."""

    resume_cause = TRAINER_FAILURE


class TrainerExitError(ContainerError):
    """The training process of a rank exited with a non-zero code (``exit_code``, ``task``,
    ``pod`` say which)."""

    resume_cause = TRAINER_FAILURE


class TrainerCrashLoopError(ContainerError):
    """A rank's container kept crashing and restarting in place (``restartPolicy: OnFailure``)
    until the job's restarts passed ``max_container_restarts``; the job is deleted. The fields
    are the crash-looping container's and its last exit's; ``restarts`` counts all ranks'."""

    resume_cause = TRAINER_FAILURE

    def __init__(self, message: str, *, restarts: int = 0, **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.restarts = restarts


class StoppedFromWandbError(AirflowFailException, ContainerError):
    """The job's W&B run was stopped from the W&B UI or API (the seed's way to cancel a
    training, ``wait.wandb_stop``); the job is deleted. An ``AirflowFailException``: no retry
    starts again what a person chose to stop (clear the task to train again). The fields name
    the stopped rank when its pod could still be read.
    """

    resume_cause = STOPPED_FROM_WANDB


class TrainingStalledError(ContainerError):
    """The job ran, but its master printed no log line for ``stall_timeout`` seconds (a hung
    collective, a deadlocked data loader); the job is deleted. The message ends with every
    rank's last log lines; the fields are the master's and the stall's (``wait.stall.Stall``,
    ``wandb_step`` and ``wandb_logged_at`` ``None`` when W&B was not asked).
    """

    resume_cause = TRAINER_FAILURE

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

    resume_cause = TRAINER_FAILURE


class JobRefusedError(VolcanoJobError):
    """Kubernetes refused to create the job (an admission webhook, validation, a missing
    permission: a 4xx answer); nothing was submitted and the same request will fail again."""

    resume_cause = NOT_STARTED


class JobWontFitError(JobRefusedError):
    """The job can never be placed (``job.fit``): its gang asks more than its Volcano queue's
    capability, or more than the nodes have; it failed before anything was submitted, and the
    same request will fail again. The message names the resource and the numbers."""


class ApiserverUnreachableError(VolcanoJobError):
    """The Kubernetes API could not be reached, or watched for longer than
    ``watch_failure_grace``. The job was left alone: a retry reattaches to it."""

    resume_cause = UNKNOWN


class JobDeletedError(VolcanoJobError):
    """The job was deleted (or replaced) by someone else while this task waited on it."""

    resume_cause = DELETED


class JobTimeoutError(AirflowTaskTimeout, VolcanoJobError):
    """The task's ``execution_timeout`` was reached while the job ran (the job is deleted)."""

    resume_cause = TIMEOUT

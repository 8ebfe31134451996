"""What a deferred wait is about, as one value: the trigger's fields, stored and read back.

Pure. Airflow stores a trigger as its class path and keyword arguments (``serialize()``), in
its database, and re-creates it from them in whichever triggerer runs it. So the fields are
one frozen dataclass whose ``to_kwargs`` is plain JSON and whose ``from_kwargs`` takes back
what any release stored: the keys have always been these field names. No field holds the
W&B API key: the followed log is masked with salted digests (``SecretDigest.to_json``), and
the stall timeout's W&B run is named by its connection id, which the triggerer reads.
It stands beside the trigger, not in ``wait/``: it names the followed log's caps too, and
``logs/`` stands above ``wait/``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR
from airflow_volcano_wandb.logs.log_lines import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES
from airflow_volcano_wandb.wait.judge import DEFAULT_WATCH_FAILURE_GRACE, WaitTarget
from airflow_volcano_wandb.wait.stall import WandbRunRef


@dataclass(frozen=True)
class WaitSpec:
    """The wait on one Volcano job, as the trigger is given it (field order: the trigger's
    positional order).

    :param job_name: the Volcano job to wait on.
    :param namespace: its namespace.
    :param job_uid: the uid of the submission waited on; a job recreated under the same name
        by someone else counts as the original being deleted.
    :param kubernetes_conn_id: the ``kubernetes`` connection (cncf.kubernetes semantics), with
        ``config_file``, ``cluster_context`` and ``in_cluster`` overriding it.
    :param pending_timeout: seconds until every rank must be placed and running.
    :param deadline: wall-clock time (epoch seconds) at which to give up, for
        ``execution_timeout``.
    :param poll_interval: seconds between progress checks of the timeouts; the job's state
        itself arrives through the watch as soon as Volcano sets it.
    :param delete_on_kill: delete the job when a user kills, clears or fails the deferred task.
    :param watch_failure_grace: seconds the list/watch may keep failing (403, 401, 404,
        5xx, timeouts; each retried with backoff) before the task fails, without touching
        the job (the next try reattaches).
    :param watch_selector: label selector of the shared watch; by default only the jobs
        this provider manages are cached. A job outside it (submitted by something else) is
        followed on the namespace's unfiltered watch; ``None`` starts there.
    :param try_number: the try that waits; a kill deletes the job only while no newer try
        has adopted it.
    :param follow_master_log: also log the master pod's lines while waiting (``master_log``);
        never changes the outcome.
    :param master_log_max_lines: at most this many master log lines for the job.
    :param master_log_max_bytes: at most this many bytes of master log for the job.
    :param masked_secrets: secrets to mask in the followed log, as digests
        (``SecretDigest.to_json``): the secrets themselves never reach the trigger.
    :param deferred_at: when the task deferred to this trigger (epoch seconds): it fires no
        sooner than ``defer_settle_seconds()`` later. ``None``: not deferred (the sync wait).
    :param max_container_restarts: the restart budget (``restart_budget``); ``None``: none, as
        for a trigger stored by a release without the budget.
    :param stall_timeout: seconds a running job's master may print nothing (``stall``);
        ``None``: no limit, as for a trigger stored by a release without it.
    :param wandb_conn_id: the ``wandb`` connection whose key reads the job's online W&B run
        (``wandb_run_id`` in ``wandb_entity``/``wandb_project``): a master silent for
        ``stall_timeout`` whose run logged a step meanwhile is not stalled, and a run stopped
        from W&B ends a job still running ``wandb_stop_grace`` later. ``None``: W&B is not
        asked (an offline run, no key, a trigger stored before these fields).
    :param startup_timeout: seconds a placed rank's container may keep failing to start for a
        reason that may heal (``startup``); ``None``: not looked for, as for a trigger stored
        by a release without it.
    :param waiting_since: when this try's wait began (epoch seconds), deferred or not: the
        startup budget counts from no earlier, so a retry that reattaches to a job whose key
        Secret it has just delivered gives the kubelet the whole budget.
    :param wandb_summary_keys: the run's summary metrics shown beside the training's progress
        (``training_progress``); ``None``: none.
    :param wandb_stop_grace: seconds a job may run on after its W&B run was heard stopped
        (``wandb_stop``); ``None``: W&B is not asked, as for a trigger stored by a release
        without it.
    """

    job_name: str
    namespace: str
    job_uid: str | None = None
    kubernetes_conn_id: str | None = "kubernetes_default"
    config_file: str | None = None
    cluster_context: str | None = None
    in_cluster: bool | None = None
    pending_timeout: float | None = None
    deadline: float | None = None
    poll_interval: float = 10.0
    delete_on_kill: bool = True
    watch_failure_grace: float = DEFAULT_WATCH_FAILURE_GRACE
    watch_selector: str | None = MANAGED_SELECTOR
    try_number: int | None = None
    follow_master_log: bool = False
    master_log_max_lines: int = DEFAULT_MAX_LINES
    master_log_max_bytes: int = DEFAULT_MAX_BYTES
    # A tuple, so the frozen value cannot change under the trigger; a list again in kwargs.
    masked_secrets: tuple[Mapping[str, Any], ...] = ()
    deferred_at: float | None = None
    max_container_restarts: int | None = None
    stall_timeout: float | None = None
    wandb_conn_id: str | None = None
    wandb_run_id: str | None = None
    wandb_entity: str | None = None
    wandb_project: str | None = None
    startup_timeout: float | None = None
    waiting_since: float | None = None
    wandb_stop_grace: float | None = None
    wandb_summary_keys: list[str] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "masked_secrets", tuple(self.masked_secrets or ()))

    def to_kwargs(self) -> dict[str, Any]:
        """The trigger's stored keyword arguments: plain JSON, every field by its name."""
        kwargs = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        kwargs["masked_secrets"] = [dict(digest) for digest in self.masked_secrets]
        return kwargs

    @classmethod
    def from_kwargs(cls, kwargs: Mapping[str, Any]) -> WaitSpec:
        """The spec of stored keyword arguments; a key this release does not know is an error,
        as it would be for the trigger's constructor."""
        return cls(**kwargs)

    def target(self) -> WaitTarget:
        """The job and the limits ``judge`` holds it to."""
        return WaitTarget(
            name=self.job_name,
            namespace=self.namespace,
            uid=self.job_uid,
            pending_timeout=self.pending_timeout,
            deadline=self.deadline,
            max_container_restarts=self.max_container_restarts,
            stall_timeout=self.stall_timeout,
            startup_timeout=self.startup_timeout,
            waiting_since=self.waiting_since,
            wandb_stop_grace=self.wandb_stop_grace,
        )

    def wandb_run(self) -> WandbRunRef | None:
        """The online W&B run the wait asks (``stall.stalled_online``, ``training_progress``,
        ``wandb_stop``); ``None``: none."""
        return WandbRunRef.of_kwargs(vars(self))

    def connection_key(self) -> tuple:
        """What makes two waits share a Kubernetes connection (and the namespace's watch)."""
        return (self.kubernetes_conn_id, self.config_file, self.cluster_context, self.in_cluster)

    def connection_kwargs(self) -> dict[str, Any]:
        """The async hook's connection arguments (the connection key's, by name)."""
        names = ("conn_id", "config_file", "cluster_context", "in_cluster")
        return dict(zip(names, self.connection_key(), strict=True))

    def is_ours(self, job: Mapping[str, Any]) -> bool:
        """Whether ``job`` is the submission waited on (any, when no uid is pinned)."""
        return not self.job_uid or job["metadata"].get("uid") == self.job_uid

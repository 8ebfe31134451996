"""What a deferred wait is about, as one value: the trigger's fields, stored and read back.

Pure. Airflow stores a trigger as its class path and keyword arguments (``serialize()``), in
its database, and re-creates it from them in whichever triggerer runs it. So the fields are
one frozen dataclass whose ``to_kwargs`` is plain JSON and whose ``from_kwargs`` takes back
what any release stored: the keys have always been these field names. No field holds the
W&B API key: the followed log is masked with salted digests (``SecretDigest.to_json``), and
the W&B run is named by its connection id, which the triggerer reads. It stands beside the
trigger, not in ``wait/``: it names the followed log's caps, and ``logs/`` stands above.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR
from airflow_volcano_wandb.logs.log_lines import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES
from airflow_volcano_wandb.wait.judge import (
    DEFAULT_WATCH_FAILURE_GRACE,
    JobLimits,
    JobTarget,
    WandbRunRef,
)


@dataclass(frozen=True)
class WaitSpec(JobLimits):
    """What a wait is about and with which limits, built once by ``Waiter.spec`` and handed
    whole to the trigger and back (``to_kwargs``, ``from_kwargs``).

    ``job_name`` and ``namespace`` are the trigger's positional arguments. A field named as an
    option of the operator or the sensor means what that option does (``parts/``); a limit
    left ``None`` is off, as for a trigger stored by a release without it. The limits are
    ``JobLimits``'; the others:

    :param job_uid: the submission waited on; a job recreated under its name counts as deleted.
    :param poll_interval: seconds between checks of the timeouts (the job's state: by watch).
    :param watch_selector: label selector of the shared watch (the jobs this provider
        manages); a job outside it is followed on the namespace's unfiltered watch, and
        ``None`` starts there.
    :param try_number: the try that waits; a kill deletes the job only while no newer try
        has adopted it.
    :param masked_secrets: digests of the secrets to mask in the followed log
        (``SecretDigest.to_json``): the secrets themselves never reach the trigger.
    :param deferred_at: when the task deferred (epoch seconds): the trigger fires no sooner
        than ``defer_settle_seconds()`` later. ``None``: the sync wait.
    :param wandb_conn_id: the ``wandb`` connection whose key reads the job's online run
        (``wandb_run_id`` in ``wandb_entity``/``wandb_project``); ``None``: W&B is not asked.
    """

    job_name: str
    namespace: str
    job_uid: str | None = None
    kubernetes_conn_id: str | None = "kubernetes_default"
    config_file: str | None = None
    cluster_context: str | None = None
    in_cluster: bool | None = None
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
    wandb_conn_id: str | None = None
    wandb_run_id: str | None = None
    wandb_entity: str | None = None
    wandb_project: str | None = None
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

    def target(self) -> JobTarget:
        """The job and the limits ``judge`` holds it to: the fields of the same names."""
        shared = {f.name for f in dataclasses.fields(JobTarget)} & set(vars(self))
        return JobTarget(**{name: getattr(self, name) for name in shared})

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

"""How much of the pods' logs the task log shows: live while waiting, and at the end."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from airflow.sdk import BaseOperator

from airflow_volcano_wandb.logs.log_lines import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.wandb.key_forms import key_forms


class PodLogMixin(BaseOperator):
    """Parameters of the pod logs shown in the task log.

    While the job runs, the master (rank 0) pod's log: always in sync mode, in deferrable
    mode only when asked, since each follow holds a stream in the triggerer (see
    docs/architecture.md); the same follow (``logs/master_log.py``) either way. When it
    ends, the tail of the pods' logs.

    :param follow_master_log: while deferred, the triggerer also follows the master pod's
        log into the task log (``[<pod>] <line>``), following a restarted container or a
        replaced pod again. At most ``[volcano_wandb] max_concurrent_log_follows`` (default
        50) jobs are followed at once per triggerer; the others wait for a slot. Never
        changes the task's outcome.
    :param master_log_max_lines: at most this many master log lines in the task log per
        try (sync or deferred); then one line says the log was capped.
    :param master_log_max_bytes: at most this many bytes (UTF-8) of master log lines in the
        task log per try.
    :param log_lines: lines of pod logs to show on completion or failure.
    """

    def __init__(
        self,
        *,
        follow_master_log: bool = False,
        master_log_max_lines: int = DEFAULT_MAX_LINES,
        master_log_max_bytes: int = DEFAULT_MAX_BYTES,
        log_lines: int = 50,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.follow_master_log = follow_master_log
        self.master_log_max_lines = master_log_max_lines
        self.master_log_max_bytes = master_log_max_bytes
        self.log_lines = log_lines

    def master_log_kwargs(
        self, masked: Iterable[str | None] = (), *, follow: bool | None = None
    ) -> dict[str, Any]:
        """The trigger's arguments for the master log (followed when ``follow``, by default
        when ``follow_master_log`` says so), with digests of the ``masked`` W&B keys to mask
        in it."""
        follow = self.follow_master_log if follow is None else follow
        digests = [d.to_json() for d in masked_digests(masked)] if follow else []
        return {
            "follow_master_log": follow,
            "master_log_max_lines": self.master_log_max_lines,
            "master_log_max_bytes": self.master_log_max_bytes,
            "masked_secrets": digests,
        }


def masked_digests(keys: Iterable[str | None]) -> list[SecretDigest]:
    """Digests of the W&B ``keys`` in each of their forms (``key_forms``), for a follow to
    mask: the triggerer's log masker does not know them, and may not be told."""
    return [SecretDigest.of(form) for key in keys if key for form in key_forms(key)]

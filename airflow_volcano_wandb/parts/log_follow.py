"""How much of the pods' logs the task log shows: live while waiting, and at the end.

While the job runs, the master pod's log (``logs/master_log.py``): always in a sync wait, in a
deferred one only when asked, since each follow holds a stream in the triggerer. When it ends,
the tail of the pods' logs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.logs.log_lines import DEFAULT_MAX_BYTES, DEFAULT_MAX_LINES
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.parts.options import option
from airflow_volcano_wandb.wandb.key_forms import key_forms


@dataclass(frozen=True, kw_only=True)
class LogFollow:
    """The pod logs shown in the task log (see the module's docstring)."""

    follow_master_log: bool = option(
        False,
        """while deferred, the triggerer also follows the master pod's log into the task log
        (``[<pod>] <line>``), following a restarted container or a replaced pod again. At most
        ``[volcano_wandb] max_concurrent_log_follows`` (default 50) jobs are followed at once
        per triggerer; the others wait for a slot. Never changes the task's outcome.""",
    )
    master_log_max_lines: int = option(
        DEFAULT_MAX_LINES,
        """at most this many master log lines in the task log per try (sync or deferred);
        then one line says the log was capped.""",
    )
    master_log_max_bytes: int = option(
        DEFAULT_MAX_BYTES,
        "at most this many bytes (UTF-8) of master log lines in the task log per try.",
    )
    log_lines: int = option(50, "lines of pod logs to show on completion or failure.")

    def trigger_kwargs(
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

"""``wandb-queue://<entity>/<queue>``: a template read from a W&B Launch queue (pure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit

QUEUE_REF_SCHEME = "wandb-queue"


@dataclass(frozen=True)
class WandbQueueRef:
    """A W&B Launch queue named by ``wandb-queue://<entity>/<queue>``."""

    entity: str
    queue: str

    def __str__(self) -> str:
        return f"{QUEUE_REF_SCHEME}://{quote(self.entity, safe='')}/{quote(self.queue, safe='')}"


def is_queue_ref(value: object) -> bool:
    """Whether ``value`` is a string in the ``wandb-queue://`` scheme (maybe malformed)."""
    return isinstance(value, str) and value.strip().lower().startswith(f"{QUEUE_REF_SCHEME}:")


def parse_queue_ref(value: str) -> WandbQueueRef:
    """Parse ``wandb-queue://<entity>/<queue>`` into its entity and queue name.

    Percent-escapes are decoded, so a queue name with spaces is written ``my%20queue``.
    Raises ``ValueError`` for anything else, including a missing entity or queue, extra path
    segments, a query string or a fragment.
    """
    if not is_queue_ref(value):
        raise ValueError(f"not a {QUEUE_REF_SCHEME}:// reference: {value!r}")
    parts = urlsplit(value.strip())
    path_segments: Sequence[str] = parts.path.split("/")[1:] if parts.path else []
    if (
        not parts.netloc
        or len(path_segments) != 1
        or not path_segments[0]
        or parts.query
        or parts.fragment
    ):
        raise ValueError(
            f"malformed queue reference {value!r}: expected "
            f"{QUEUE_REF_SCHEME}://<entity>/<queue-name>"
        )
    entity, queue = unquote(parts.netloc), unquote(path_segments[0])
    if not entity.strip() or not queue.strip():
        raise ValueError(f"malformed queue reference {value!r}: empty entity or queue name")
    return WandbQueueRef(entity=entity, queue=queue)


@dataclass(frozen=True)
class QueueTemplate:
    """What a W&B Launch queue holds for a run: its Volcano Job template (macros and
    ``{{name}}`` untouched) and its template variables as W&B returns them,
    ``[{"name", "schema"}]`` (empty: the queue declares none)."""

    template: dict[str, Any]
    template_variable_schemas: list[dict[str, Any]] = field(default_factory=list)

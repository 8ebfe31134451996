"""Reading a W&B Launch queue through ``wandb.Api``: its Volcano Job template and its template
variables, as :class:`~airflow_volcano_wandb.hooks.wandb.WandbHook` hands them out.

A Kubernetes queue stores ``{"resource_args": {"kubernetes": <job spec>}}`` as its default
resource config, and the variables its admin declared (``{{name}}`` in the config, each with a
schema) arrive with it, in the same GraphQL answer (``GetDefaultResourceConfig``).
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.template.load import load_queue_config
from airflow_volcano_wandb.wandb.wandb_queue_ref import QueueTemplate


def read_queue(api: Any, entity: str, queue_name: str) -> QueueTemplate:
    """The queue's template, macros and ``{{name}}`` untouched, and its variables as W&B returns
    them (``[{"name", "schema"}]``).

    :raises ValueError: when the queue is missing, has no resource config or is not a
        Kubernetes queue, or the config is not a mapping.
    """
    where = f"{entity}/{queue_name}"
    queue = api.run_queue(entity, queue_name)
    try:
        queue.access  # noqa: B018 - loads the queue's metadata (one GraphQL query)
    except Exception as exc:  # wandb wraps "no such queue" as CommError(TypeError)
        raise ValueError(f"W&B Launch queue {where} not found or not readable: {exc}") from exc
    # wandb (0.31) asks the server for the config even when the metadata says the queue has
    # none (a null id), so check first; the attribute is private, hence the getattr.
    if getattr(queue, "_default_resource_config_id", "unknown") is None:
        raise ValueError(f"W&B Launch queue {where} has no resource config")
    config = queue.default_resource_config
    # Both arrive with the config: no extra query.
    resource = queue.type if config else None
    variables = queue.template_variables if config else None
    return QueueTemplate(
        template=load_queue_config(config, resource, where),
        template_variable_schemas=[dict(v) for v in variables or ()],
    )

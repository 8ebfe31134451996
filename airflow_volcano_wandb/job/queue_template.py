"""Where a run's template and its template variables' guardrails come from: a
``wandb-queue://`` template's variables are bounded by the queue's schemas only, which a DAG
cannot widen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.template import TemplateError, TemplateSource
from airflow_volcano_wandb.wandb.wandb_queue_ref import is_queue_ref

if TYPE_CHECKING:
    from airflow_volcano_wandb.hooks.wandb import WandbHook

Schemas = Sequence[Mapping[str, Any] | str]


def template_and_schemas(
    template: TemplateSource, template_variable_schemas: Schemas | None, wandb_hook: WandbHook
) -> tuple[TemplateSource, Schemas | None]:
    """The template to render and the schemas that bound its variables: a queue's own (``None``
    when it declares none), else the DAG's. Raises ``TemplateError`` for schemas given with a
    queue template, ``ValueError`` when the queue cannot be read."""
    if not is_queue_ref(template):
        return template, template_variable_schemas
    if template_variable_schemas is not None:
        raise TemplateError(
            "template_variable_schemas: a wandb-queue:// template's variables and their "
            "guardrails are the queue's own, read from W&B; a DAG cannot declare or widen them"
        )
    queue = wandb_hook.get_queue(str(template))
    return queue.template, queue.template_variable_schemas or None

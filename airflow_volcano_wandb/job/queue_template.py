"""Where a run's template and its template variables' guardrails come from.

A ``wandb-queue://`` template is read from its W&B Launch queue, with the variables the queue's
admin declared: those schemas, and only those, bound the run's ``template_variables``. A DAG
cannot widen them, so a DAG that declares schemas for a queue template is refused. Any other
template's variables are the ones the DAG declares.
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
    """The template to render and the schemas that bound its variables (``render_job``'s
    ``template`` and ``template_variable_schemas``): a queue's own (``None`` when it declares
    none: its config is then rendered as any template without variables), else the DAG's.

    :raises TemplateError: when schemas are given for a queue template.
    :raises ValueError: when the queue cannot be read (see ``WandbHook.get_queue``).
    """
    if not is_queue_ref(template):
        return template, template_variable_schemas
    if template_variable_schemas is not None:
        raise TemplateError(
            "template_variable_schemas: a wandb-queue:// template's variables and their "
            "guardrails are the queue's own, read from W&B; a DAG cannot declare or widen them"
        )
    queue = wandb_hook.get_queue(str(template))
    return queue.template, queue.template_variable_schemas or None

"""Render a W&B Launch queue template into the Volcano Job one run submits (the public API).

:func:`render_job` is the whole API (``render.py``); the stages it runs live beside it, one
concept per module. See ``docs/templates.md``.
"""

from airflow_volcano_wandb.template.errors import TemplateError
from airflow_volcano_wandb.template.macros import BUILTIN_MACROS
from airflow_volcano_wandb.template.pod_security import LEVELS as POD_SECURITY_LEVELS
from airflow_volcano_wandb.template.policy import DEFAULT_ALLOWED_SCHEDULERS
from airflow_volcano_wandb.template.render import (
    RunEnv,
    TemplateSource,
    job_as_yaml,
    load_template,
    master_task_name,
    render_job,
)
from airflow_volcano_wandb.template.torchrun import DEFAULT_SHM_SIZE
from airflow_volcano_wandb.template.trigger_params import (
    image_param,
    params_from_template_variables,
)
from airflow_volcano_wandb.versions import VOLCANO_VERSION as DEFAULT_VOLCANO_VERSION

__all__ = [
    "BUILTIN_MACROS",
    "DEFAULT_ALLOWED_SCHEDULERS",
    "DEFAULT_SHM_SIZE",
    "DEFAULT_VOLCANO_VERSION",
    "POD_SECURITY_LEVELS",
    "RunEnv",
    "TemplateError",
    "TemplateSource",
    "image_param",
    "job_as_yaml",
    "load_template",
    "master_task_name",
    "params_from_template_variables",
    "render_job",
]

"""Pure helpers behind :mod:`airflow_volcano_wandb.template`; one concept per module.

Import the public API from ``airflow_volcano_wandb.template``, not from here.
"""

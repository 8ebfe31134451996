from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger

__all__ = ["VolcanoJobTrigger"]

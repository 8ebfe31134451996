from airflow_volcano_wandb.sensors.volcano import VolcanoJobSensor

__all__ = ["VolcanoJobSensor"]

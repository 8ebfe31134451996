from airflow_volcano_wandb.operators.volcano import VolcanoPyTorchJobOperator

__all__ = ["VolcanoPyTorchJobOperator"]

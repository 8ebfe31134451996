"""The W&B side: the run's identity and env, the link back from the run, URLs and queue
references, sweeps, and the ``wandb`` connection's form."""

"""Pod logs in a task log: whole lines, the master's log followed, the W&B key masked."""

"""The DAG of the Celery worker kill trials (tests/reliability/test_celery_airflow.py): the
reliability DAGs' ``train`` task with one retry, so a try whose worker died is followed by
the next try, which must reattach to the job the first one submitted.

The window is 10 s rather than 15 s: the trial kills the worker early in try 1's window and
waits out try 2's whole window before its second kill; a shorter one keeps the trial cheap.
"""

from __future__ import annotations

from datetime import timedelta

from avw_reliability_dags import TRAIN, _dag

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

with _dag("avw_rel_celery_retried"):
    VolcanoPyTorchJobOperator(
        **{**TRAIN, "retries": 1},
        retry_delay=timedelta(seconds=1),
        poll_interval=2,
        defer_after=10,
    )

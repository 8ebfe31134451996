"""A deferred wait fires no sooner than ``defer_settle_seconds`` after the deferral.

Airflow fails a deferred task whose trigger fires before the scheduler has processed the
deferring worker's exit (apache/airflow#67287, #72716); a job that ends within seconds of the
deferral must not lose its outcome to that race. The wait itself is shown on the cluster
(``tests/integration/test_trigger_on_cluster.py``); here, who sets the bound (the sensor's:
``tests/unit/sensors/test_volcano.py``).
"""

from __future__ import annotations

import time

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.triggers.volcano import (
    DEFAULT_DEFER_SETTLE_SECONDS,
    VolcanoJobTrigger,
    defer_settle_seconds,
)
from test_support.waits import operator_trigger


def _triggered(*, deferred: bool) -> VolcanoJobTrigger:
    """The operator's wait on its job, deferred or here."""
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml")
    return operator_trigger(op, deferred=deferred)


def test_the_operator_bounds_a_deferred_wait_and_not_its_own():
    before = time.time()
    deferred = _triggered(deferred=True).serialize()[1]
    assert before <= deferred["deferred_at"] <= time.time()
    assert _triggered(deferred=False).spec.deferred_at is None  # sync: no race


def test_the_settle_time_is_configured_per_triggerer(monkeypatch):
    monkeypatch.delenv("AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS")  # the tests' own 0
    assert defer_settle_seconds() == DEFAULT_DEFER_SETTLE_SECONDS == 15.0
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS", "4.5")
    assert defer_settle_seconds() == 4.5
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS", "-3")
    assert defer_settle_seconds() == 0.0

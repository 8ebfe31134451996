"""The sensor itself (``sensors/volcano.py``): what it hands the wait it shares with the
operator (``parts/job_wait.py``, tested beside it and under ``tests/unit/wait``) when it
waits on job ``j`` in ``ns``."""

from __future__ import annotations

import json
import time
from typing import Any

from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.wandb.key_forms import key_forms
from test_support.waits import sensor_trigger

KEY = "0123456789abcdef0123456789abcdef01234567"


def _sensor(**options: Any) -> VolcanoJobSensor:
    """The sensor of a DAG's ``wait`` task on job ``j`` in ``ns``."""
    return VolcanoJobSensor(task_id="wait", job_name="j", namespace="ns", **options)


def test_the_sensor_follows_the_master_log_with_its_connection_key_masked(monkeypatch):
    connection = {"conn_type": "wandb", "password": KEY}
    monkeypatch.setenv("AIRFLOW_CONN_WANDB_SENSED", json.dumps(connection))
    followed = _sensor(
        wandb_conn_id="wandb_sensed", follow_master_log=True, master_log_max_lines=10
    )
    kwargs = sensor_trigger(followed).serialize()[1]
    assert (kwargs["follow_master_log"], kwargs["master_log_max_lines"]) == (True, 10)
    digests = [SecretDigest.from_json(d) for d in kwargs["masked_secrets"]]
    assert [d.matches(form) for d, form in zip(digests, key_forms(KEY), strict=True)] == [True] * 3
    assert not any(form in json.dumps(kwargs) for form in key_forms(KEY))
    assert sensor_trigger(_sensor()).serialize()[1]["follow_master_log"] is False


def test_the_sensor_bounds_its_deferred_wait():
    """As the operator's deferred wait (``tests/unit/triggers/test_defer_settle.py``)."""
    sensor = _sensor()
    before = time.time()
    assert before <= sensor_trigger(sensor).serialize()[1]["deferred_at"] <= time.time()


def test_the_sensor_waits_the_operators_defer_after_window():
    """The window itself: ``tests/unit/triggers/test_defer_after.py``."""
    assert _sensor(defer_after=12).waiter.parts.wait.defer_after == 12

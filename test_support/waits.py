"""The triggers the operator and the sensor hand the triggerer, built by the ``Waiter`` each
holds (``parts/waiter.py``) as their ``execute`` builds them, for job ``j`` in ``ns``; and
a trigger as the triggerer rebuilds it from what was serialized."""

from __future__ import annotations

import importlib
from typing import Any

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.operator_parts import OperatorParts
from airflow_volcano_wandb.parts.waiter import Waiter
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger

JOB = {"name": "j", "namespace": "ns", "uid": "u"}


def operator_trigger(
    op: VolcanoPyTorchJobOperator, *, deferred: bool = True, run_id: str | None = None
) -> VolcanoJobTrigger:
    """The operator's wait on ``JOB``, deferred or in its process, asking W&B run ``run_id``."""
    parts = OperatorParts.of(op)
    waiter = Waiter(op, parts, try_number=1, resume=parts.resume)
    poll = parts.submit.poll_interval
    return waiter.trigger(JOB, deferred=deferred, deadline=None, poll_interval=poll, run_id=run_id)


def sensor_trigger(sensor: VolcanoJobSensor, job: dict[str, Any] | None = None) -> Any:
    """The sensor's deferred wait on ``JOB``, whose W&B run ``job`` (as read) names."""
    waiter = sensor.waiter
    return waiter.trigger(
        JOB,
        deferred=True,
        deadline=None,
        poll_interval=sensor.poke_interval,
        run_id=waiter.run_id(job),
    )


def reloaded(trigger: Any) -> Any:
    """``trigger`` as the triggerer rebuilds it: its class imported from the serialized
    classpath, given the serialized kwargs."""
    classpath, kwargs = trigger.serialize()
    module, _, name = classpath.rpartition(".")
    return getattr(importlib.import_module(module), name)(**kwargs)

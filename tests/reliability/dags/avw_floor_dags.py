"""Airflow's own deferrable tasks, the floor ``e2e_real_airflow`` measures the provider against.

Both wait ``params.after_s`` seconds from the moment their first try runs (the deferral) with
Airflow's own ``DateTimeTrigger``, so they cost the triggerer and the scheduler what any
deferral does. (A moment already past when the task defers would fire at once and meet
Airflow's race of a trigger firing before its task's process has ended: counted from the
deferral, as the provider's settle does, it does not.)

- ``avw_floor_resume``: a deferral that resumes on a worker, whose ``execute_complete`` only
  returns (what every deferrable operator pays after its trigger fires, and nothing more);
- ``avw_floor_sensor``: ``DateTimeSensorAsync`` with ``end_from_trigger``, which the
  triggerer marks successful itself, no worker involved.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.providers.standard.sensors.date_time import DateTimeSensorAsync
from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import DAG, BaseOperator

PARAMS = {"after_s": 15}


class ResumeOnWorker(BaseOperator):
    """Defer for ``params.after_s`` seconds, then resume on a worker and return."""

    def execute(self, context: Any) -> None:
        moment = pendulum.now("UTC").add(seconds=float(context["params"]["after_s"]))
        self.defer(trigger=DateTimeTrigger(moment=moment), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Any = None) -> None:
        return None


def _dag(dag_id: str) -> DAG:
    return DAG(
        dag_id=dag_id,
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        params=dict(PARAMS),
    )


with _dag("avw_floor_resume"):
    ResumeOnWorker(task_id="train", retries=0)

with _dag("avw_floor_sensor"):
    DateTimeSensorAsync(
        task_id="train",
        # Rendered when the try starts, just before it defers.
        target_time=(
            "{{ (macros.datetime.utcnow() + macros.timedelta(seconds=params.after_s))"
            ".isoformat() }}+00:00"
        ),
        end_from_trigger=True,
        retries=0,
    )

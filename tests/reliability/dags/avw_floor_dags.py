"""Airflow's own deferrable task, the floor ``e2e_real_airflow`` measures beside the provider
and ``KubernetesPodOperator``: what any task resumed on a worker pays after its trigger fires.

``avw_floor_resume`` waits ``params.runs_s`` seconds from its deferral with Airflow's own
``DateTimeTrigger`` (counted from the deferral: a moment already past would fire at once and
meet Airflow's deferral race), then resumes on a worker whose ``execute_complete`` only returns.
The file imports what such a DAG imports and nothing else, since every task process parses it.
"""

from __future__ import annotations

from typing import Any

import pendulum
from airflow.providers.standard.triggers.temporal import DateTimeTrigger
from airflow.sdk import DAG, BaseOperator


class ResumeOnWorker(BaseOperator):
    """Defer for ``params.runs_s`` seconds, then resume on a worker and return."""

    def execute(self, context: Any) -> None:
        moment = pendulum.now("UTC").add(seconds=float(context["params"]["runs_s"]))
        self.defer(trigger=DateTimeTrigger(moment=moment), method_name="execute_complete")

    def execute_complete(self, context: Any, event: Any = None) -> None:
        return None


with DAG(
    dag_id="avw_floor_resume",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    params={"runs_s": "45"},
):
    ResumeOnWorker(task_id="train", retries=0)

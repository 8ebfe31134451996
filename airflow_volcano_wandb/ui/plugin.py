"""The provider's Airflow plugin: the Training app (``training_app``) served by the API server,
a Training tab on every task instance page and a Training page in the navigation (Airflow 3.1
and later place ``external_views``); on 3.0, which has neither, a "Training" extra link on the
tasks of the provider's operator and sensor opens the tab's page (docs/training-tab.md)."""

from __future__ import annotations

from airflow.plugins_manager import AirflowPlugin

from airflow_volcano_wandb.ui.training_app import PREFIX, SHELL, app
from airflow_volcano_wandb.ui.training_link import TrainingLink


class TrainingPlugin(AirflowPlugin):
    name = "volcano_wandb_training"
    fastapi_apps = [{"app": app, "url_prefix": PREFIX, "name": "Volcano + W&B training"}]
    external_views = [
        {
            "name": "Training",
            "href": PREFIX + "/ti/{DAG_ID}/{RUN_ID}/{TASK_ID}/{MAP_INDEX}",
            "destination": "task_instance",
            "url_route": "avw-training",
        },
        {
            "name": "Training",
            "href": PREFIX + "/",
            "destination": "nav",
            "category": "browse",
            "url_route": "avw-training-jobs",
        },
    ]
    #: Airflow 3.0 only (no ``external_views``; ``SHELL`` is empty there)
    global_operator_extra_links = [] if SHELL else [TrainingLink()]

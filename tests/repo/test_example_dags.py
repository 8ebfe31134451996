"""The example DAGs are something to copy: every training task pins its image's tag (the seed's
``imagePullPolicy: IfNotPresent`` would keep a node's first ``:latest``) and bounds each try
with ``execution_timeout``. (``volcano_pytorch_manual``'s image is the trigger form's choice.)
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from test_support.airflow_compat import dag_bag

REPO = Path(__file__).resolve().parents[2]
#: (DAG, task) of every training task of these example DAGs.
TRAINING_TASKS = [("volcano_pytorch_retraining", "train"), ("volcano_pytorch_sweep", "train")]


@pytest.fixture(scope="module")
def dags() -> dict[str, Any]:
    bag = dag_bag(str(REPO / "dags"))
    assert bag.import_errors == {}
    return bag.dags


def _kwargs(task: Any) -> dict[str, Any]:
    """What the task was given: a mapped task's partial arguments, else its attributes."""
    partial = getattr(task, "partial_kwargs", None)
    if partial is not None:
        return partial
    return {"image_uri": task.image_uri, "execution_timeout": task.execution_timeout}


@pytest.mark.parametrize(("dag_id", "task_id"), TRAINING_TASKS)
def test_the_image_tag_is_pinned(dags, dag_id, task_id):
    image = _kwargs(dags[dag_id].get_task(task_id))["image_uri"]
    name, _, tag = image.rpartition("/")[2].partition(":")
    assert name and tag and tag != "latest", image


@pytest.mark.parametrize(("dag_id", "task_id"), TRAINING_TASKS)
def test_each_try_is_bounded(dags, dag_id, task_id):
    timeout = _kwargs(dags[dag_id].get_task(task_id))["execution_timeout"]
    assert isinstance(timeout, timedelta) and timedelta(0) < timeout <= timedelta(hours=12)

"""The manual DAG's trigger form reaches elastic workers (issue 51): its two fields become the
job's gang and workers, the worker replicas' bounds hold for them, and a range that makes no
sense is refused naming the field, with nothing submitted."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.operators import preview
from test_support.cluster_jobs import REPO
from test_support.jobs import load_dag

MANUAL = REPO / "dags" / "volcano_pytorch_manual.py"


def _job(**form):
    """The job the manual DAG's submit task renders for a trigger form with ``form``."""
    submit = load_dag(MANUAL, "volcano_pytorch_manual").get_task("submit")
    for name, value in form.items():
        submit.params[name] = value  # validated as the form validates it
    return preview.rendered_job(submit)


def test_the_form_leaves_elastic_off_by_default():
    params = load_dag(MANUAL, "volcano_pytorch_manual").params
    assert params.get_param("elastic").value is False
    assert params.get_param("min_workers").schema["title"]
    job = _job(worker_replicas=3)
    assert job["spec"]["minAvailable"] == 4
    assert "airflow-volcano-wandb.io/elastic-workers" not in job["metadata"]["annotations"]


def test_the_forms_elastic_fields_become_the_jobs_gang_and_workers():
    job = _job(elastic=True, min_workers=2, worker_replicas=5, gpus_per_worker=1)
    master, worker = job["spec"]["tasks"]
    assert type(worker["replicas"]) is int and worker["replicas"] == 5
    assert (job["spec"]["minAvailable"], master["minAvailable"], worker["minAvailable"]) == (
        3,
        1,
        2,
    )
    env = {e["name"]: e.get("value") for e in worker["template"]["spec"]["containers"][0]["env"]}
    assert env["PET_NNODES"] == "3:6" and env["PET_RDZV_BACKEND"] == "c10d"
    assert {"events": ["PodEvicted", "PodFailed"], "action": "RestartPod"} in worker["policies"]
    assert job["metadata"]["annotations"]["airflow-volcano-wandb.io/elastic-workers"] == "2:5"


def test_the_form_refuses_what_the_worker_replicas_bounds_refuse():
    with pytest.raises(Exception, match=r"1000|maximum"):
        _job(elastic=True, min_workers=1, worker_replicas=1000)


def test_fewest_workers_above_the_worker_replicas_is_refused_naming_the_field():
    with pytest.raises(AirflowException) as caught:
        _job(elastic=True, min_workers=4, worker_replicas=2)
    assert "elastic.min_workers: is 4, above max_workers (2)" in str(caught.value)

"""The flagship path, as W&B Launch delivers it (#41): the manual DAG triggered from its form's
conf through a real Airflow (``reliability_airflow``: schedulers and triggerers on the local
cluster) hands the trainer's ``wandb.config`` the form's epochs as an integer.

The Rendered Template view shows the rendered ``run_config``; the Job the submit task created is
read whole from its task log, where the operator writes it before submitting (the view keeps
only the head of a Job this long, and the simulated pods are gone by the time the deferred
sensor succeeds).
"""

from __future__ import annotations

import json

import pytest
import yaml

from test_support.airflow_runs import MANUAL_DAG, start_run

# The stack's start (shared with the other tests of the session) and one short run.
pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(1200)]


def test_the_forms_epochs_reach_wandb_config_as_an_integer(
    reliability_airflow, volcano_cluster, admin
):
    conf = {"epochs": 7, "worker_replicas": 2}
    run = start_run(
        reliability_airflow,
        volcano_cluster,
        admin,
        MANUAL_DAG,
        "typed-epochs",
        conf,
        task_id="wait",
    )
    try:
        run.expect_success()
        assert run.ti("submit")["rendered_fields"]["run_config"] == {"epochs": 7}
        log = run.task_log(1, "submit", lines=100_000)
        job = yaml.safe_load(log[log.index("---\n") : log.index("\n...\n") + 5])
        assert [t["replicas"] for t in job["spec"]["tasks"]] == [1, 2]
        for task in job["spec"]["tasks"]:
            env = {
                e["name"]: e.get("value") for e in task["template"]["spec"]["containers"][0]["env"]
            }
            config = json.loads(env["WANDB_CONFIG"])  # as wandb.init() reads it
            assert config == {"epochs": 7} and type(config["epochs"]) is int
    finally:
        run.watched.stop()

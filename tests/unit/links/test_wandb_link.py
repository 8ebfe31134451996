"""The "W&B Run" extra link, through Airflow's own machinery.

The end-to-end part runs ``dag.test()`` in a subprocess with its own ``AIRFLOW_HOME`` and
SQLite metadata DB, so it does not depend on (or disturb) the Airflow configuration of the
pytest process. It then reads the link the way the API server's extra-links endpoint does:
serialized DAG from the DB, ``task.get_extra_links(ti, "W&B Run")``.
"""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from airflow_volcano_wandb.airflow_compat import INSTALLED_AIRFLOW
from airflow_volcano_wandb.links import WANDB_RUN_URL_XCOM_KEY, WandbRunLink
from test_support.airflow_compat import serialize_dag

REPO = Path(__file__).resolve().parents[3]
URL = "https://wandb.ai/team/mlp/runs/abc123"

DAG_FILE = textwrap.dedent(
    """
    import datetime, os, time

    from airflow.sdk import DAG, BaseOperator

    from airflow_volcano_wandb.links import WandbRunLink

    URL = %(url)r


    class PushesRunUrl(BaseOperator):
        # What the training operator does: push the URL first, then wait for the job.
        operator_extra_links = (WandbRunLink(),)

        def __init__(self, *, fail=False, wait_for_release=False, **kwargs):
            super().__init__(**kwargs)
            self.fail = fail
            self.wait_for_release = wait_for_release

        def execute(self, context):
            context["ti"].xcom_push(key="wandb_run_url", value=URL)
            if self.wait_for_release:
                open(os.environ["AVW_PUSHED"], "w").close()
                deadline = time.monotonic() + 120
                while not os.path.exists(os.environ["AVW_RELEASE"]):
                    if time.monotonic() > deadline:
                        raise TimeoutError("test driver never released the task")
                    time.sleep(0.05)
            if self.fail:
                raise RuntimeError("training failed")


    class NoRun(BaseOperator):
        operator_extra_links = (WandbRunLink(),)

        def execute(self, context):
            return None


    start = datetime.datetime(2026, 1, 1)
    with DAG("link_finished", schedule=None, start_date=start) as finished:
        PushesRunUrl(task_id="train")
        PushesRunUrl(task_id="train_fails", fail=True)
        NoRun(task_id="no_run")

    with DAG("link_running", schedule=None, start_date=start) as running:
        PushesRunUrl(task_id="train", wait_for_release=True)
    """
)

DRIVER = textwrap.dedent(
    """
    import json, os, sys, threading, time

    from airflow.utils.db import initdb

    initdb()
    sys.path.insert(0, os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    import link_dags
    from sqlalchemy import select

    from airflow.models.taskinstance import TaskInstance
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    from test_support.airflow_compat import latest_serialized_dag

    results = {"running": None, "finished": {}, "xcom": {}}


    def links(dag, run_id):
        # The API server's extra-links endpoint: serialized DAG + task.get_extra_links(ti, name).
        dag_id = dag.dag_id
        out = {}
        with create_session() as session:
            sdag = latest_serialized_dag(dag, session)
            tis = session.scalars(
                select(TaskInstance).where(
                    TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
                )
            )
            for ti in tis:
                task = sdag.get_task(ti.task_id)
                out[ti.task_id] = {
                    "state": str(ti.state),
                    "extra_links": list(task.extra_links),
                    "url": task.get_extra_links(ti, "W&B Run"),
                }
        return out


    def check_while_running():
        while not os.path.exists(os.environ["AVW_PUSHED"]):
            time.sleep(0.05)
        try:
            with create_session() as session:
                ti = session.scalars(
                    select(TaskInstance).where(TaskInstance.dag_id == "link_running")
                ).one()
                run_id = ti.run_id
            results["running"] = links(link_dags.running, run_id)["train"]
        finally:
            open(os.environ["AVW_RELEASE"], "w").close()


    # dag.test() installs signal handlers, so it must own the main thread; the observer that
    # plays the API server while the task runs is the background thread.
    observer = threading.Thread(target=check_while_running)
    observer.start()
    link_dags.running.test()
    observer.join()

    dag_run = link_dags.finished.test()
    results["finished"] = links(link_dags.finished, dag_run.run_id)
    with create_session() as session:
        for x in session.scalars(select(XComModel).where(XComModel.run_id == dag_run.run_id)):
            results["xcom"][f"{x.task_id}/{x.key}"] = x.value
    print("AVW_RESULTS " + json.dumps(results, default=str))
    """
)


def test_link_name_and_key() -> None:
    link = WandbRunLink()
    assert link.name == "W&B Run"
    assert link.xcom_key == WANDB_RUN_URL_XCOM_KEY == "wandb_run_url"


def test_link_is_serialized_as_an_xcom_link_on_the_operators_key() -> None:
    # The API server never imports the operator: it rebuilds links from the serialized DAG as
    # {name: xcom_key}. Pointing at "wandb_run_url" is what makes the button work mid-run.
    from airflow.sdk import DAG, BaseOperator

    class Op(BaseOperator):
        operator_extra_links = (WandbRunLink(),)

    with DAG("ser", schedule=None, start_date=datetime.datetime(2026, 1, 1)) as dag:
        Op(task_id="t")
    encoded = serialize_dag(dag)
    (task,) = encoded["dag"]["tasks"]
    assert task["__var"]["_operator_extra_links"] == {"W&B Run": "wandb_run_url"}


@pytest.fixture(scope="module")
def dag_test_results(tmp_path_factory: pytest.TempPathFactory) -> dict:
    home = tmp_path_factory.mktemp("airflow_home")
    dags = home / "dags"
    dags.mkdir()
    (dags / "link_dags.py").write_text(DAG_FILE % {"url": URL})
    env = {
        **os.environ,
        "AIRFLOW_HOME": str(home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AVW_PUSHED": str(home / "pushed"),
        "AVW_RELEASE": str(home / "release"),
        "PYTHONPATH": str(REPO),  # the driver imports test_support.airflow_compat
    }
    proc = subprocess.run(
        [sys.executable, "-c", DRIVER],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("AVW_RESULTS ")]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"dag.test() driver failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(lines[-1].removeprefix("AVW_RESULTS "))


def test_link_renders_while_the_task_runs_under_dag_test(dag_test_results: dict) -> None:
    running = dag_test_results["running"]
    assert running["state"] == "running"
    # Airflow 3.0 also has the Training page's link (no tab there: docs/training-tab.md)
    training = ["Training"] if INSTALLED_AIRFLOW.release < (3, 1) else []
    assert running["extra_links"] == [*training, "W&B Run"]
    assert running["url"] == URL


def test_link_renders_after_success_and_failure_under_dag_test(dag_test_results: dict) -> None:
    finished = dag_test_results["finished"]
    assert finished["train"]["state"] == "success"
    assert finished["train"]["url"] == URL
    # A failed training run still links to its W&B run (where the failure is visible).
    assert finished["train_fails"]["state"] == "failed"
    assert finished["train_fails"]["url"] == URL


def test_no_link_when_no_run_was_chosen_under_dag_test(dag_test_results: dict) -> None:
    assert dag_test_results["finished"]["no_run"]["url"] in ("", None)


def test_run_url_is_in_xcom_under_dag_test(dag_test_results: dict) -> None:
    xcom = {key: _xcom_value(value) for key, value in dag_test_results["xcom"].items()}
    assert xcom["train/wandb_run_url"] == URL
    # Finalisation re-pushes get_link()'s result under the same key; it must not clobber it.
    assert xcom["train_fails/wandb_run_url"] == URL


def _xcom_value(stored: object) -> object:
    # The XCom table keeps JSON; depending on the column type it comes back decoded or not.
    if isinstance(stored, str):
        try:
            return json.loads(stored)
        except ValueError:
            return stored
    return stored

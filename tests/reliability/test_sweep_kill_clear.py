"""A mapped sweep on a real Airflow (scheduler, triggerer, API server; the executor that
``EXECUTOR`` names, CeleryExecutor with two workers by default): per map index, a kill deletes
only that index's Volcano job, and a clear retrains only that index.

Too long for the default suite (a whole Airflow stack and two DAG runs): marked ``long``,
run by ``make test-long``.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest

from airflow_volcano_wandb.job.ownership import INTENT_LABEL, MAP_INDEX_LABEL, WANDB_RUN_LABEL
from airflow_volcano_wandb.testing.recorder import Recorder
from test_support.airflow_runs import ReliabilityStack
from test_support.cluster_jobs import SIM_DURATION, list_jobs, seed_template
from tests.e2e.airflow_stack import REPO, AirflowStack, wait_for
from tests.e2e.executors import executor_from_env

pytestmark = [pytest.mark.long, pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(2400)]

DAG_ID = "avw_rel_sweep"
WANDB_CONN = {"conn_type": "wandb", "extra": {"entity": "test-entity", "project": "test-project"}}
GONE_WITHIN = 15.0  # seconds from the kill to the job gone, as in test_deferred_kill


@pytest.fixture(scope="module")
def stack(volcano_cluster) -> Iterator[AirflowStack]:
    home = Path(tempfile.mkdtemp(prefix="avw-sweep-airflow-"))
    stack = ReliabilityStack(  # patient with DAG imports on a busy machine
        home=home,
        log_dir=REPO / "test-artifacts" / "reliability" / "sweep-logs",
        kubeconfig=volcano_cluster.kubeconfig,
        wandb_conn=WANDB_CONN,
        dags_folder=Path(__file__).parent / "dags",  # avw_rel_sweep among them
        executor=executor_from_env(),  # as the session's reliability stack
    )
    try:
        stack.start(timeout=900)  # a loaded 2-core machine starts the API server slowly
        wait_for(lambda: stack.api("GET", f"/dags/{DAG_ID}"), 240, f"DAG {DAG_ID}")
        stack.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
        yield stack
    finally:
        stack.stop()
        shutil.rmtree(home, ignore_errors=True)


def _trigger(stack: AirflowStack, namespace: str, seconds: int) -> str:
    run_id = f"sweep-{uuid.uuid4().hex[:6]}"
    template = seed_template(
        master={SIM_DURATION: str(seconds)}, worker={SIM_DURATION: str(seconds)}
    )
    stack.trigger(DAG_ID, run_id, {"template": template, "namespace": namespace})
    return run_id


def _tis(stack: AirflowStack, run_id: str) -> dict[int, dict]:
    path = f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances"
    return {ti["map_index"]: ti for ti in stack.api("GET", path)["task_instances"]}


def _live(api, namespace: str) -> dict[int, str]:
    """Map index -> uid of the live (not being deleted) jobs."""
    return {
        int(job["metadata"]["labels"][MAP_INDEX_LABEL]): job["metadata"]["uid"]
        for job in list_jobs(api, namespace)
        if not job["metadata"].get("deletionTimestamp")
    }


def test_killing_one_map_index_deletes_only_its_job(stack, volcano_cluster):
    api = volcano_cluster.api_client()
    namespace = volcano_cluster.create_namespace("sweep-kill")
    try:
        run_id = _trigger(stack, namespace, seconds=600)

        def all_deferred():
            stack.check_alive()
            tis = _tis(stack, run_id)
            live = _live(api, namespace)
            ok = len(tis) == 3 and all(ti["state"] == "deferred" for ti in tis.values())
            return live if ok and len(live) == 3 else None

        before = wait_for(all_deferred, 300, "three deferred map indexes with a job each")
        stack.api(
            "PATCH",
            f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/train/1",
            json={"new_state": "failed"},
        )
        wait_for(lambda: 1 not in _live(api, namespace), GONE_WITHIN, "map index 1's job gone")
        after = _live(api, namespace)
        assert after == {0: before[0], 2: before[2]}  # the others' jobs, untouched
        tis = _tis(stack, run_id)
        assert tis[1]["state"] == "failed"
        assert tis[0]["state"] == tis[2]["state"] == "deferred"
        for index in (0, 2):  # end the others the same way
            stack.api(
                "PATCH",
                f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}/taskInstances/train/{index}",
                json={"new_state": "failed"},
            )
        wait_for(lambda: not _live(api, namespace), 60, "every job gone")
    finally:
        volcano_cluster.delete_namespace(namespace)
        api.close()


def test_clearing_one_map_index_retrains_only_that_one(stack, volcano_cluster):
    api = volcano_cluster.api_client()
    namespace = volcano_cluster.create_namespace("sweep-clear")
    try:
        with Recorder.jobs(api, namespace) as recorded:
            run_id = _trigger(stack, namespace, seconds=3)

            def finished():
                stack.check_alive()
                tis = _tis(stack, run_id)
                states = {ti["state"] for ti in tis.values()}
                if states & {"failed", "upstream_failed"}:
                    raise AssertionError(f"a map index failed: {tis}")
                return tis if len(tis) == 3 and states == {"success"} else None

            wait_for(finished, 300, "the three map indexes to succeed")
            # A clear landing while the scheduler marks the run successful is lost to it.
            run_path = f"/dags/{DAG_ID}/dagRuns/{quote(run_id, safe='')}"
            wait_for(
                lambda: stack.api("GET", run_path)["state"] == "success", 120, "the run to end"
            )
            first = {job["metadata"]["uid"]: job for job in recorded.seen()}
            assert len(first) == 3
            stack.clear(DAG_ID, run_id, [["train", 1]])
            tis = wait_for(
                lambda: (t := finished()) and t[1]["try_number"] == 2 and t,
                300,
                "map index 1 to train again",
            )
            wait_for(lambda: len(recorded.seen()) == 4, 30, "the new job recorded")
            jobs = recorded.seen()
        assert {index: ti["try_number"] for index, ti in tis.items()} == {0: 1, 1: 2, 2: 1}
        new = [job for job in jobs if job["metadata"]["uid"] not in first]
        assert len(new) == 1  # one new job, for map index 1, as a new intent and a new W&B run
        labels = new[0]["metadata"]["labels"]
        assert labels[MAP_INDEX_LABEL] == "1" and labels[INTENT_LABEL] == "2"
        old_runs = {job["metadata"]["labels"][WANDB_RUN_LABEL] for job in first.values()}
        assert labels[WANDB_RUN_LABEL] not in old_runs and len(old_runs) == 3
    finally:
        volcano_cluster.delete_namespace(namespace)
        api.close()

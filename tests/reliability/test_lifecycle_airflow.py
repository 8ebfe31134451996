"""One job per intent, through a real Airflow: clears retrain, deployments stay apart.

A real Airflow 3 (``reliability_airflow``: PostgreSQL, API server, two schedulers, DAG
processor, two triggerers) runs the DAGs on the shared local cluster, each run in a namespace
of its own:

- a successful task (``on_finish_action="keep"``) is cleared: its next try submits a new job
  that trains, and the old, reported job is neither reused nor touched;
- the example manual DAG's ``submit`` + ``wait`` pair is cleared after success: a new job
  trains, the sensor waits on that one and succeeds, and nothing is left behind;
- a deferred task is cleared and its next try starts at once (the scheduler queues it while
  the old try's trigger is being cancelled, so the new try can list the job before the old
  ``on_kill`` runs): exactly one job survives, the new try succeeds. Repeated
  ``AVW_LIFECYCLE_REPEATS`` times (2 in the default suite, 20 in ``make test-lifecycle``);
- two Airflow homes with different ``[volcano_wandb] deployment`` run the same DAG with the
  same run id in one namespace at the same time (``dag.test()``, a process per home): two
  jobs, two W&B run ids, each run succeeds on its own job.

The Airflow 3.3 task state store is read back through the REST API: it names the job the
current try waited on.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from kubernetes import client

from airflow_volcano_wandb.job.ownership import (
    DEPLOYMENT_LABEL,
    MANAGED_SELECTOR,
    REPORTED_ANNOTATION,
    WANDB_RUN_LABEL,
)
from test_support.airflow_runs import DAGS, WANDB_CONN, Run, start_run
from test_support.cluster_jobs import SIM_DURATION, list_jobs, seed_template
from tests.e2e.airflow_stack import wait_for

pytestmark = [pytest.mark.long, pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(1800)]

REPEATS = int(os.environ.get("AVW_LIFECYCLE_REPEATS", "2"))
BATCH = 4  # runs cleared together: two schedulers, each with LocalExecutor parallelism 2
# Not shorter: a job that ends within seconds of the deferral races Airflow's scheduler, which
# may then take the worker's stale defer-exit "success" for a task killed externally and fail
# it (apache/airflow#67287, #72716; seen here on 3.3.2 with the try re-queued).
QUICK = seed_template(master={SIM_DURATION: "15"}, worker={SIM_DURATION: "600"})


def _live(run: Run) -> list[dict]:
    return [j for j in run.watched.jobs() if not j["metadata"].get("deletionTimestamp")]


def _by_uid(jobs: list[dict]) -> dict[str, dict]:
    return {j["metadata"]["uid"]: j for j in jobs}


def _phase(job: dict) -> str | None:
    return ((job.get("status") or {}).get("state") or {}).get("phase")


def _key_secrets(api, namespace: str) -> list:
    return (
        client.CoreV1Api(api)
        .list_namespaced_secret(namespace, label_selector=MANAGED_SELECTOR)
        .items
    )


def test_clearing_a_successful_task_trains_a_new_job(reliability_airflow, volcano_cluster, admin):
    run = start_run(
        reliability_airflow,
        volcano_cluster,
        admin,
        "avw_rel_keep",
        "clear-success",
        {"template": QUICK},
    )
    try:
        run.expect_success()
        [first] = run.watched.jobs()
        first_uid = first["metadata"]["uid"]
        first_run_id = run.xcom("wandb_run_id")
        assert run.state_store("volcano_job")["uid"] == first_uid

        run.wait_run_ended()
        run.clear()
        run.expect_success(try_number=2)

        jobs = _by_uid(run.watched.jobs())
        assert len(jobs) == 2 and first_uid in jobs, list(jobs)  # a new job; the old one kept
        old = jobs.pop(first_uid)
        [new] = jobs.values()
        assert old["metadata"]["annotations"][REPORTED_ANNOTATION] == "1"  # untouched
        assert old["metadata"]["resourceVersion"] == first["metadata"]["resourceVersion"]
        assert _phase(new) == "Completed"
        assert new["metadata"]["annotations"][REPORTED_ANNOTATION] == "2"
        assert new["metadata"]["name"] != first["metadata"]["name"]
        second_run_id = run.xcom("wandb_run_id")
        assert second_run_id == new["metadata"]["labels"][WANDB_RUN_LABEL] != first_run_id
        assert run.state_store("volcano_job")["uid"] == new["metadata"]["uid"]
    finally:
        run.watched.stop()
        volcano_cluster.delete_namespace(run.watched.namespace)


def test_clearing_the_manual_dags_submit_and_sensor_trains_a_new_job(
    reliability_airflow, volcano_cluster, admin
):
    run = start_run(
        reliability_airflow,
        volcano_cluster,
        admin,
        "volcano_pytorch_manual",
        "clear-manual",
        {"worker_replicas": 1},
        task_id="wait",
    )
    try:
        run.expect_success()
        first = run.xcom("volcano_job", task_id="submit")
        assert run.xcom("return_value")["uid"] == first["uid"]

        run.wait_run_ended()
        run.clear(["submit"], include_downstream=True)
        run.expect_success(try_number=2)
        assert run.ti("submit")["try_number"] == 2
        second = run.xcom("volcano_job", task_id="submit")
        assert second["uid"] != first["uid"]  # a new job trained
        assert run.xcom("return_value")["uid"] == second["uid"]  # and the sensor waited on it
        assert run.watched.seen == {first["uid"], second["uid"]}
        # The sensor deleted each job after its success; the key's Secret went with it.
        wait_for(lambda: not run.watched.jobs(), 60, "the second job deleted")
        wait_for(
            lambda: not _key_secrets(admin, run.watched.namespace),
            60,
            "the key's Secret deleted",
        )
    finally:
        run.watched.stop()
        volcano_cluster.delete_namespace(run.watched.namespace)


def test_clear_while_deferred_leaves_exactly_one_job_and_the_new_try_succeeds(
    reliability_airflow, volcano_cluster, admin
):
    template = seed_template(master={SIM_DURATION: "20"}, worker={SIM_DURATION: "600"})
    outcomes: dict[str, int] = {"reattached": 0, "resubmitted": 0}
    wrong_deletions = 0
    for start in range(0, REPEATS, BATCH):
        runs = [
            start_run(
                reliability_airflow,
                volcano_cluster,
                admin,
                "avw_rel_keep",
                f"clear-deferred-{i}",
                {"template": template},
            )
            for i in range(start, min(start + BATCH, REPEATS))
        ]
        try:
            firsts = {}
            for run in runs:
                run.wait_deferred()
                [firsts[run.run_id]] = run.watched.live_uids()
            for run in runs:
                run.clear()  # the next try is queued at once, while the old trigger is cancelled
            for run in runs:
                ti = run.wait_ended(try_number=2)
                if ti["state"] != "success":
                    wrong_deletions += 1
                    print(f"{run.run_id} try 2 ended {ti['state']}:\n{run.task_log(2)}")
                    continue
                [survivor] = _live(run)  # exactly one job left
                assert _phase(survivor) == "Completed"
                assert survivor["metadata"]["annotations"][REPORTED_ANNOTATION] == "2"
                assert run.state_store("volcano_job")["uid"] == survivor["metadata"]["uid"]
                same = survivor["metadata"]["uid"] == firsts[run.run_id]
                outcomes["reattached" if same else "resubmitted"] += 1
        finally:
            for run in runs:
                run.watched.stop()
                volcano_cluster.delete_namespace(run.watched.namespace)
    print(f"clear while deferred, {REPEATS} rounds: {outcomes}, wrong deletions {wrong_deletions}")
    assert wrong_deletions == 0
    assert sum(outcomes.values()) == REPEATS


DAG_TEST = """
import json, sys
from pathlib import Path
import pendulum
from test_support.jobs import load_dag
day = pendulum.datetime(2026, 1, 1, tz="UTC")
run = load_dag(Path(sys.argv[1]), "avw_rel_keep").test(
    run_after=day, logical_date=day, run_conf=json.loads(sys.argv[2])
)
print("DAG RUN", run.run_id, getattr(run.state, "value", run.state))
sys.exit(0 if run.state == "success" else 1)
"""


def _airflow_home(deployment: str, kubeconfig: Path, migrated: Path) -> dict[str, str]:
    """The environment of an Airflow home of its own, named ``deployment``, with a metadata
    DB of its own (a copy of the session's freshly migrated, empty one)."""
    home = Path(tempfile.mkdtemp(prefix=f"avw-deploy-{deployment}-"))
    # SQLite's backup API: a consistent copy, with what is still in the source's WAL.
    src, dst = sqlite3.connect(migrated / "airflow.db"), sqlite3.connect(home / "airflow.db")
    try:
        src.backup(dst)
    finally:
        src.close()
        dst.close()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            # The DAG file imports the Kubernetes clients: slow on a busy 2-core machine.
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "300",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES_REGEXP": "airflow_volcano_wandb.*",
            "AIRFLOW__VOLCANO_WANDB__DEPLOYMENT": deployment,
            "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
            ),
            "AIRFLOW_CONN_WANDB_DEFAULT": json.dumps(WANDB_CONN),
            "WANDB_MODE": "offline",
        }
    )
    return env


def test_two_deployments_run_the_same_dag_run_side_by_side(
    airflow_db, volcano_cluster, volcano_namespace, admin
):
    envs = {
        d: _airflow_home(d, volcano_cluster.kubeconfig, airflow_db) for d in ("staging", "prod")
    }
    template = seed_template(master={SIM_DURATION: "45"}, worker={SIM_DURATION: "600"})
    conf = json.dumps({"template": template, "namespace": volcano_namespace})
    # ``airflow dags test`` names its run after the current time; dag.test() with a fixed
    # run_after gives both deployments the same run id, as two schedulers would.
    command = [sys.executable, "-c", DAG_TEST, str(DAGS / "avw_reliability_dags.py"), conf]
    logs = {d: Path(env["AIRFLOW_HOME"]) / "dags-test.log" for d, env in envs.items()}
    procs = {
        d: subprocess.Popen(
            command,
            env=env,
            cwd=env["AIRFLOW_HOME"],
            stdout=logs[d].open("wb"),
            stderr=subprocess.STDOUT,
        )
        for d, env in envs.items()
    }
    most_running = 0  # both jobs were there at once: the runs overlapped
    while any(p.poll() is None for p in procs.values()):
        jobs = list_jobs(admin, volcano_namespace)
        most_running = max(most_running, sum(_phase(j) != "Completed" for j in jobs))
        time.sleep(1)
    texts = {d: path.read_text(errors="replace") for d, path in logs.items()}
    for deployment, proc in procs.items():
        assert proc.returncode == 0, texts[deployment][-3000:]
    assert most_running == 2
    run_ids = {d: re.findall(r"DAG RUN (\S+) success", text) for d, text in texts.items()}
    assert run_ids["prod"] == run_ids["staging"] == ["manual__2026-01-01T00:00:00+00:00"]
    jobs = {
        j["metadata"]["labels"][DEPLOYMENT_LABEL]: j for j in list_jobs(admin, volcano_namespace)
    }
    assert sorted(jobs) == ["prod", "staging"]
    for deployment, job in jobs.items():
        meta = job["metadata"]
        assert _phase(job) == "Completed"
        assert meta["annotations"][REPORTED_ANNOTATION] == "1"  # reported by its own run only
        other = jobs["prod" if deployment == "staging" else "staging"]["metadata"]
        assert meta["name"] not in texts["prod" if deployment == "staging" else "staging"]
        assert meta["labels"][WANDB_RUN_LABEL] != other["labels"][WANDB_RUN_LABEL]
        assert meta["labels"][WANDB_RUN_LABEL] in texts[deployment]
    secrets = _key_secrets(admin, volcano_namespace)
    assert len(secrets) == 2
    owners = sorted(ref.uid for s in secrets for ref in s.metadata.owner_references or [])
    assert owners == sorted(j["metadata"]["uid"] for j in jobs.values())

"""End to end: the retraining DAG's asset event schedules the promotion DAG in a real Airflow.

A real Airflow 3 (API server, scheduler, DAG processor, triggerer, LocalExecutor) serves
``dags/``, the W&B connection points at the API stand-in (every run finished with
``eval/accuracy`` 0.91), and both example DAGs are unpaused. Nothing is triggered by hand:
the scheduler makes the weekly run of ``volcano_pytorch_retraining`` (its default namespace,
``wandb``, exists on the local cluster for this test), the training job runs on Volcano, the
task emits the model asset's event with the W&B record in its ``extra``, and the scheduler
starts ``volcano_pytorch_promote`` from that event. The test reads the event back through the
REST API and checks that the promotion DAG received the same ``extra`` and stored the best
metric in the asset's state.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from kubernetes import client

from airflow_volcano_wandb.wandb.wandb_run import deterministic_run_id, run_url
from test_support.airflow_runs import started
from test_support.wandb_standin import WandbStandin
from tests.e2e.airflow_stack import REPO, AirflowStack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

TRAIN_DAG, PROMOTE_DAG = "volcano_pytorch_retraining", "volcano_pytorch_promote"
ASSET = "volcano_pytorch_model"
NAMESPACE = "wandb"  # the retraining DAG's default: a scheduled run has no conf
ENTITY, PROJECT = "airflow", "volcano-ddp"
API_KEY = "standin" + "fedcba9876543210" * 3
ACCURACY = 0.91
ARTIFACTS = REPO / "test-artifacts" / "e2e-assets"
USED = ("mnist-shards", 3, "dataset")  # (name, version, type) every stand-in run used
LOGGED = ("ddp-mlp", 0, "model")  # ... and logged


@dataclass
class Chain:
    """The two DAG runs the scheduler made, as the REST API reports them."""

    stack: AirflowStack
    standin: WandbStandin
    train_run: dict[str, Any]
    promote_run: dict[str, Any]
    lineage_file: Path

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str) -> Any:
        path = (
            f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
            f"/xcomEntries/{key}"
        )
        value = self.stack.api("GET", path)["value"]  # as stored: JSON, maybe as text
        return json.loads(value) if isinstance(value, str) and value[:1] in "{[" else value

    def task_instance(self, dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
        path = f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances/{task_id}"
        return self.stack.api("GET", path)

    def states(self, dag_id: str, run_id: str) -> dict[str, str]:
        answer = self.stack.api(
            "GET", f"/dags/{dag_id}/dagRuns/{quote(run_id, safe='')}/taskInstances"
        )
        return {ti["task_id"]: ti["state"] for ti in answer["task_instances"]}


@pytest.fixture(scope="module")
def training_namespace(volcano_cluster) -> Iterator[str]:
    with volcano_cluster.api_client() as api:
        core = client.CoreV1Api(api)
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=NAMESPACE)))
        wait_for(
            lambda: any(
                sa.metadata.name == "default"
                for sa in core.list_namespaced_service_account(NAMESPACE).items
            ),
            30,
            "the namespace's default service account",
            interval=0.2,
        )
    try:
        yield NAMESPACE
    finally:
        volcano_cluster.delete_namespace(NAMESPACE)


@pytest.fixture(scope="module")
def chain(volcano_cluster, training_namespace) -> Iterator[Chain]:
    home = Path(tempfile.mkdtemp(prefix="avw-e2e-assets-"))
    log_dir = ARTIFACTS / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    standin = WandbStandin(
        api_key=API_KEY,
        any_run_summary={"eval/accuracy": ACCURACY},
        any_run_artifacts={"used": [USED], "logged": [LOGGED]},
    ).start()
    lineage_file = home / "openlineage.jsonl"
    stack = AirflowStack(
        home=home,
        log_dir=log_dir,
        kubeconfig=volcano_cluster.kubeconfig,
        wandb_conn={
            "conn_type": "wandb",
            "host": standin.url,
            "password": API_KEY,
            "extra": {"entity": ENTITY, "project": PROJECT},
        },
        # Two example DAG files parse in one process on two shared cores: give it time.
        extra_env={
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "150",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
            # OpenLineage events as JSON lines in a file (the openlineage provider's transport).
            "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps(
                {"type": "file", "log_file_path": str(lineage_file), "append": True}
            ),
            "AIRFLOW__OPENLINEAGE__NAMESPACE": "avw-e2e",
            # The listener gives up after 10 s by default: far too little on 2 shared cores.
            "AIRFLOW__OPENLINEAGE__EXECUTION_TIMEOUT": "300",
        },
    )
    try:
        # A loaded 2-core machine: migrating alone can take minutes.
        with started(stack, home, timeout=600):
            for dag_id in (PROMOTE_DAG, TRAIN_DAG):  # the consumer first: it must see the event
                wait_for(lambda d=dag_id: stack.api("GET", f"/dags/{d}"), 400, f"DAG {dag_id}")
                stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})

            def finished(dag_id: str) -> dict[str, Any] | None:
                stack.check_alive()
                runs = stack.api("GET", f"/dags/{dag_id}/dagRuns")["dag_runs"]
                done = [run for run in runs if run["state"] in ("success", "failed")]
                return done[0] if done else None

            train_run = wait_for(lambda: finished(TRAIN_DAG), 900, "the scheduled training run")
            promote_run = wait_for(lambda: finished(PROMOTE_DAG), 600, "the promotion run")
            yield Chain(stack, standin, train_run, promote_run, lineage_file)
    finally:
        standin.stop()


def test_the_scheduled_training_run_succeeded_on_the_standin(chain: Chain) -> None:
    assert chain.train_run["run_type"] == "scheduled"
    assert chain.train_run["state"] == "success", chain.states(
        TRAIN_DAG, chain.train_run["dag_run_id"]
    )


def test_the_deferred_tasks_rendered_template_view_shows_the_job_it_submitted_on_the_standin(
    chain: Chain,
) -> None:
    # Resumed by the triggerer in a new process, which renders the fields afresh: the Job
    # comes back with the deferral. Airflow's default [core] max_templated_field_length
    # (4096) keeps the Job's head, which says what and where it is.
    ti = chain.task_instance(TRAIN_DAG, chain.train_run["dag_run_id"], "train")
    shown = ti["rendered_fields"]["rendered_job"]
    assert shown.startswith("Truncated. You can change this behaviour"), shown[:300]
    head = shown.split("---\n", 1)[1]
    assert head.startswith("apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata:\n"), head
    assert "airflow-volcano-wandb.io/" in head  # the labels that name the task instance


def test_the_asset_event_carries_the_wandb_record_on_the_standin(chain: Chain) -> None:
    run_id = chain.train_run["dag_run_id"]
    events = chain.stack.api("GET", "/assets/events", params={"source_dag_id": TRAIN_DAG})
    (event,) = events["asset_events"]
    job = chain.xcom(TRAIN_DAG, run_id, "train", "volcano_job")
    # The id is derived from the try that submitted (a try may fail before submitting).
    wandb_run_id = chain.xcom(TRAIN_DAG, run_id, "train", "wandb_run_id")
    assert len(wandb_run_id) == 16 and wandb_run_id in {
        deterministic_run_id(TRAIN_DAG, "train", run_id, intent=i) for i in (1, 2, 3)
    }
    assert event["source_run_id"] == run_id
    extra = dict(event["extra"])
    # What the run cost, per rank (CPU ranks cost 0): the master's pod is always there; a
    # worker still running when its CompleteJob fired was removed by Volcano and is counted
    # from when the gang was whole to the job's end.
    usage = extra.pop("gpu_seconds")
    assert set(usage) == {"master-0", "worker-0", "worker-1"}, usage
    # None unless a try was interrupted (a kill on a loaded machine) and the next resumed it.
    assert extra.pop("resumed_from_intent") in (None, 1, 2)
    assert extra.pop("resumed_from_step") is None  # its simulated trainer prints no resume
    assert extra.pop("resume_saved_gpu_seconds") is None
    assert extra == {
        "wandb_run_id": wandb_run_id,
        "wandb_run_url": run_url(chain.standin.url, ENTITY, PROJECT, wandb_run_id),
        "wandb_summary": {"eval/accuracy": ACCURACY},
        "volcano_job": job["name"],
        "volcano_job_uid": job["uid"],
        "volcano_namespace": NAMESPACE,
        "image": "ghcr.io/example/volcano-ddp-mlp:1.0.0",
        "images": {
            "master": "ghcr.io/example/volcano-ddp-mlp:1.0.0",
            "worker": "ghcr.io/example/volcano-ddp-mlp:1.0.0",
        },
        "replicas": {"master": 1, "worker": 2},
        "world_size": 3,  # processes: one per CPU pod
        "elastic": {},  # not an elastic job (docs/assets.md)
        "throughput": {},  # the stand-in's summary has no _runtime to divide by
    }
    (ARTIFACTS / "asset-event.json").write_text(json.dumps(event, indent=2))


def test_the_event_started_the_promotion_dag_with_the_extra_intact_on_the_standin(
    chain: Chain,
) -> None:
    run_id = chain.promote_run["dag_run_id"]
    assert chain.promote_run["run_type"] == "asset_triggered"
    assert chain.promote_run["state"] == "success"
    assert chain.states(PROMOTE_DAG, run_id) == {
        "evaluate": "success",
        "promote": "success",
        "keep_current": "skipped",
    }
    (event,) = chain.stack.api("GET", "/assets/events", params={"source_dag_id": TRAIN_DAG})[
        "asset_events"
    ]
    assert chain.xcom(PROMOTE_DAG, run_id, "evaluate", "candidate") == event["extra"]
    # The promotion wrote the asset's state: what it returned is what it stored.
    best = chain.xcom(PROMOTE_DAG, run_id, "promote", "return_value")
    assert best == {
        "accuracy": ACCURACY,
        "wandb_run_id": event["extra"]["wandb_run_id"],
        "wandb_run_url": event["extra"]["wandb_run_url"],
        "image": "ghcr.io/example/volcano-ddp-mlp:1.0.0",
    }
    # ... and the asset's state store holds it, written by the promote task of that run.
    asset_id = event["asset_id"]
    stored = chain.stack.api("GET", f"/assets/{asset_id}/state-store/best")
    assert stored["value"] == best
    assert stored["last_updated_by"]["dag_id"] == PROMOTE_DAG
    assert stored["last_updated_by"]["run_id"] == run_id


def test_the_wandb_run_links_back_to_the_airflow_task_on_the_standin(
    chain: Chain,
) -> None:
    """The provider wrote the task into the run itself (the stand-in's trainer wrote nothing)."""
    run_id = chain.train_run["dag_run_id"]
    # The id is derived from the try that submitted (a try may fail before submitting).
    wandb_run_id = chain.xcom(TRAIN_DAG, run_id, "train", "wandb_run_id")
    assert len(wandb_run_id) == 16 and wandb_run_id in {
        deterministic_run_id(TRAIN_DAG, "train", run_id, intent=i) for i in (1, 2, 3)
    }
    run = chain.standin.run(ENTITY, PROJECT, wandb_run_id)
    assert run is not None
    record = run.config["airflow"]
    assert {k: record[k] for k in ("dag_id", "run_id", "task_id", "try_number", "outcome")} == {
        "dag_id": TRAIN_DAG,
        "run_id": run_id,
        "task_id": "train",
        # A loaded machine may fail a try on an Airflow API timeout: the last try wrote.
        "try_number": chain.task_instance(TRAIN_DAG, run_id, "train")["try_number"],
        "outcome": "success",
    }
    assert record["task_url"].startswith(chain.stack.base_url)
    assert f"/dags/{TRAIN_DAG}/" in record["task_url"]
    assert run.tags == ["airflow", "airflow-success"]
    assert record["task_url"] in run.notes
    assert API_KEY not in json.dumps(chain.standin.upserts)


def test_openlineage_events_describe_the_job_the_run_and_its_artifacts_on_the_standin(
    chain: Chain,
) -> None:
    events = [json.loads(line) for line in chain.lineage_file.read_text().splitlines() if line]
    shutil.copy(chain.lineage_file, ARTIFACTS / "openlineage.jsonl")
    complete = [
        e
        for e in events
        if e.get("eventType") == "COMPLETE" and e["job"]["name"] == f"{TRAIN_DAG}.train"
    ]
    assert len(complete) == 1, [(e.get("eventType"), e["job"]["name"]) for e in events]
    (event,) = complete
    extra = chain.stack.api("GET", "/assets/events", params={"source_dag_id": TRAIN_DAG})[
        "asset_events"
    ][0]["extra"]
    job_facet = event["job"]["facets"]["volcano_job"]
    assert {k: job_facet[k] for k in ("namespace", "image", "replicas", "worldSize")} == {
        "namespace": NAMESPACE,
        "image": extra["image"],
        "replicas": {"master": 1, "worker": 2},
        "worldSize": 3,
    }
    run_facets = event["run"]["facets"]
    assert {k: run_facets["volcano_job_run"][k] for k in ("name", "namespace", "uid")} == {
        "name": extra["volcano_job"],
        "namespace": NAMESPACE,
        "uid": extra["volcano_job_uid"],
    }
    wandb = run_facets["wandb_run"]
    assert (wandb["runId"], wandb["url"], wandb["entity"], wandb["project"]) == (
        extra["wandb_run_id"],
        extra["wandb_run_url"],
        ENTITY,
        PROJECT,
    )
    assert wandb["summary"] == {"eval/accuracy": ACCURACY}
    namespace = "wandb://" + chain.standin.url.removeprefix("http://")
    assert [(d["namespace"], d["name"]) for d in event["inputs"]] == [
        (namespace, f"{ENTITY}/{PROJECT}/{USED[0]}:v{USED[1]}")
    ]
    assert [(d["namespace"], d["name"]) for d in event["outputs"]] == [
        (namespace, f"{ENTITY}/{PROJECT}/{LOGGED[0]}:v{LOGGED[1]}")
    ]
    assert API_KEY not in chain.lineage_file.read_text()

"""The W&B side on the real cluster: env in every container, the key only in a Secret."""

from __future__ import annotations

import json

import pytest
import yaml
from kubernetes import client as k8s

from airflow_volcano_wandb.job.api_key_secret import NAME_PREFIX
from airflow_volcano_wandb.job.ownership import TaskInstanceIdentity
from test_support.cluster_jobs import SIM_DURATION, list_jobs, run_dag, seed_template, wait_until

pytestmark = pytest.mark.cluster

SHARED_ENV = {
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_RUN_GROUP",
    "WANDB_JOB_TYPE",
    "WANDB_TAGS",
    "WANDB_RESUME",
    "AIRFLOW_CTX_DAG_ID",
    "AIRFLOW_CTX_DAG_RUN_ID",
    "AIRFLOW_CTX_TASK_ID",
    "AIRFLOW_CTX_TRY_NUMBER",
    "AVW_WANDB_RANK_MODE",
}


def test_every_container_gets_the_run_env_and_the_key_only_by_secret_ref(
    airflow_db,
    kubernetes_connection,
    wandb_connection,
    volcano_cluster,
    volcano_namespace,
    capfd,
    monkeypatch,
):
    monkeypatch.setenv("AIRFLOW__CORE__MAX_TEMPLATED_FIELD_LENGTH", "65536")
    api_key = wandb_connection
    api, namespace = volcano_cluster.api_client(), volcano_namespace
    template = seed_template(master={SIM_DURATION: "1"}, worker={SIM_DURATION: "1"})
    dag_run, tis = run_dag(
        "avw_test_keep", template=template, namespace=namespace, replicas={"worker": 2}
    )
    output = capfd.readouterr()
    assert tis["train"][0] == "success", output.out[-3000:]

    (job,) = list_jobs(api, namespace)
    # One Secret per job, named at render time (the same name in every container) and made by
    # this task instance: found by its labels.
    identity = TaskInstanceIdentity("avw_test_keep", "train", dag_run.run_id)
    [listed] = (
        k8s.CoreV1Api(api)
        .list_namespaced_secret(namespace, label_selector=identity.selector())
        .items
    )
    secret_name = listed.metadata.name
    assert secret_name.startswith(NAME_PREFIX)
    pods = k8s.CoreV1Api(api).list_namespaced_pod(namespace).items
    for task in job["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            env = {e["name"]: e for e in container["env"]}
            assert set(env) >= SHARED_ENV, (task["name"], sorted(env))
            assert env["WANDB_API_KEY"] == {
                "name": "WANDB_API_KEY",
                "valueFrom": {
                    "secretKeyRef": {
                        "name": secret_name,
                        "key": "api-key",
                    }
                },
            }
            if task["name"] == "master":
                assert env["WANDB_RUN_ID"]["value"] == dag_run_xcom(dag_run, "wandb_run_id")
            else:  # only rank 0 owns the run; workers cannot start stray runs
                assert "WANDB_RUN_ID" not in env
                assert env["WANDB_MODE"]["value"] == "disabled"

    # The key is in the Secret, owned by the job; nowhere in the spec, the log or XComs.
    secret = k8s.CoreV1Api(api).read_namespaced_secret(secret_name, namespace)
    assert secret.metadata.owner_references[0].uid == job["metadata"]["uid"]
    assert secret.immutable is True
    assert api_key not in json.dumps(job)
    assert api_key not in json.dumps(api.sanitize_for_serialization(pods))
    assert api_key not in output.out + output.err
    from test_support.cluster_jobs import xcoms

    assert api_key not in json.dumps(xcoms("avw_test_keep", dag_run.run_id), default=str)
    assert api_key not in json.dumps(rendered_fields("avw_test_keep", dag_run.run_id), default=str)
    # The Rendered Template view shows the Job the try submitted, its key by Secret name only
    # (whole: the DAG processor's [core] max_templated_field_length is raised in this session).
    (shown,) = [f["rendered_job"] for f in rendered_fields("avw_test_keep", dag_run.run_id)]
    assert yaml.safe_load(shown)["metadata"]["name"] == job["metadata"]["name"]
    assert f"name: {secret_name}" in shown
    assert yaml.safe_load(shown)["spec"]["tasks"][1]["replicas"] == 2

    # Deleting the job deletes the Secret (garbage collection through the ownerReference).
    k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
        "batch.volcano.sh", "v1alpha1", namespace, "jobs", job["metadata"]["name"]
    )
    wait_until(
        lambda: (
            not k8s.CoreV1Api(api)
            .list_namespaced_secret(
                namespace, label_selector="app.kubernetes.io/managed-by=airflow-volcano-wandb"
            )
            .items
        ),
        60,
        what="the key Secret garbage-collected with its job",
    )


def dag_run_xcom(dag_run, key: str):
    from test_support.cluster_jobs import xcoms

    value = xcoms(dag_run.dag_id, dag_run.run_id)[f"train.{key}"]
    return json.loads(value) if isinstance(value, str) and value.startswith('"') else value


def rendered_fields(dag_id: str, run_id: str) -> list:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = (
            session.query(RenderedTaskInstanceFields).filter_by(dag_id=dag_id, run_id=run_id).all()
        )
        return [row.rendered_fields for row in rows]

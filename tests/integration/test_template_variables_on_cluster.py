"""A W&B Launch queue's template variables, from the W&B stand-in to the local Volcano cluster.

The queue (served by the stand-in in the GraphQL shape the SDK reads) bounds its worker count
and GPUs per rank; the run's values are rendered into the job that reaches the real apiserver
and Volcano's admission webhook, and a value above a maximum submits nothing, nor does a DAG's
override past one. The path is the
one the operator takes: ``WandbHook.get_queue`` through ``template_and_schemas``, ``render_job``,
``VolcanoHook.create_job``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from airflow_volcano_wandb.airflow_compat import AirflowException
from airflow_volcano_wandb.hooks import VolcanoHook, WandbHook
from airflow_volcano_wandb.job.queue_template import template_and_schemas
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.template import TemplateError, render_job
from test_support.cluster_jobs import list_jobs, seed_template
from test_support.operator_tries import StubTaskInstance, context_for
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import API_KEY, ENTITY, use_wandb_connection

pytestmark = pytest.mark.cluster

QUEUE = f"wandb-queue://{ENTITY}/gpu-queue"
VARIABLES = {
    "workers": {"type": "integer", "minimum": 1, "maximum": 3, "default": 1},
    "gpus": {"type": "integer", "minimum": 0, "maximum": 2, "description": "GPUs per rank"},
    "tier": {"type": "string", "enum": ["small", "large"], "default": "small"},
}


def _queue_config() -> dict[str, Any]:
    """The seed as a queue admin templates it: workers and GPUs are the members' to choose."""
    template = seed_template()
    for task in template["spec"]["tasks"]:
        container = task["template"]["spec"]["containers"][0]
        container["resources"] = {"limits": {"nvidia.com/gpu": "{{gpus}}"}}
    template["spec"]["tasks"][1]["replicas"] = "{{workers}}"
    template["metadata"]["labels"]["tier"] = "{{tier}}"
    return template


@pytest.fixture
def wandb_conn(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    with WandbStandin(api_key=API_KEY) as standin:
        standin.add_queue(ENTITY, "gpu-queue", config=_queue_config(), template_variables=VARIABLES)
        yield use_wandb_connection(monkeypatch, "wandb_queue_variables", standin.url)


def _render(conn_id: str, namespace: str, values: dict[str, Any]) -> dict[str, Any]:
    template, schemas = template_and_schemas(QUEUE, None, WandbHook(conn_id))
    return render_job(
        template,
        macros={
            "image_uri": "registry.local/ddp-mlp:1.0",
            "run_id": "tv1",
            "run_name": "tv1",
            "entity_name": ENTITY,
            "project_name": "retraining",
            "author": "airflow",
        },
        namespace=namespace,
        template_variables=values,
        template_variable_schemas=schemas,
    )


def test_a_queue_template_with_variables_is_rendered_and_submitted_on_the_standin(
    kubernetes_connection, volcano_namespace, wandb_conn
):
    body = _render(wandb_conn, volcano_namespace, {"workers": "3", "gpus": 2})
    created = VolcanoHook().create_job(body, volcano_namespace)

    job = VolcanoHook().get_job(created["metadata"]["name"], volcano_namespace)
    master, worker = job["spec"]["tasks"]
    assert worker["replicas"] == 3  # an integer, as Volcano needs it
    for task in (master, worker):
        limits = task["template"]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] in (2, "2")  # the apiserver keeps a quantity as given
    assert job["metadata"]["labels"]["tier"] == "small"  # the schema's default
    assert job["spec"]["minAvailable"] == 4  # the gang follows the variable's worker count


def test_a_value_above_its_maximum_submits_nothing_on_the_standin(
    kubernetes_connection, volcano_namespace, wandb_conn, volcano_cluster
):
    with pytest.raises(TemplateError, match=r"'workers' is 4, above its maximum 3"):
        _render(wandb_conn, volcano_namespace, {"workers": 4, "gpus": 0})
    api = volcano_cluster.api_client()
    try:
        assert list_jobs(api, volcano_namespace) == []
    finally:
        api.close()


def test_an_override_past_a_variables_bound_fails_before_any_job_with_a_stub_ti_on_the_standin(
    kubernetes_connection, volcano_namespace, wandb_conn, volcano_cluster
):
    """W&B Launch drops resource overrides on a queue with variables; here an override past
    the bound of the variable that fills its field fails the task, and nothing is created."""
    op = VolcanoPyTorchJobOperator(
        task_id="train",
        template=QUEUE,
        image_uri="registry.local/ddp-mlp:1.0",
        namespace=volcano_namespace,
        wandb_conn_id=wandb_conn,
        wandb_entity=ENTITY,
        wandb_project="retraining",
        wandb_mode="offline",
        template_variables={"workers": 2, "gpus": 0},
        replicas={"worker": 20},
    )
    with pytest.raises(AirflowException, match="nothing was submitted") as info:
        op.execute(context_for(StubTaskInstance("d", "train", "over-bound")))
    assert "the replicas override sets 20: template variable 'workers' is 20, above its " in str(
        info.value
    )
    api = volcano_cluster.api_client()
    try:
        assert list_jobs(api, volcano_namespace) == []
    finally:
        api.close()

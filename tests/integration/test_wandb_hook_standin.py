"""WandbHook against a local HTTP stand-in for W&B's GraphQL API (no W&B server runs here).

The hook uses the real ``wandb`` SDK (``wandb.Api`` and its ``wandb-core`` helper process);
only the server is replaced, by ``test_support/wandb_standin.py``, seeded as
``test_support/wandb_standin_seed.py`` says (fixtures ``standin`` and ``conn_id`` in
``conftest.py``). Writing the task's link into the run: ``test_wandb_backlink_standin.py``.
Every test name says "standin".
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest
import wandb

from airflow_volcano_wandb.hooks import WandbHook
from airflow_volcano_wandb.job.queue_template import template_and_schemas
from airflow_volcano_wandb.template import TemplateError, render_job
from airflow_volcano_wandb.wandb.key_forms import key_forms
from test_support.wandb_standin import WandbStandin
from test_support.wandb_standin_seed import (
    MACROS,
    RUN_ID,
    SUMMARY,
    VARIABLES,
    seed_template,
    templated_seed,
)
from test_support.wandb_support import API_KEY, ENTITY, PROJECT, use_wandb_connection


def test_get_run_summary_against_wandb_standin(standin: WandbStandin, conn_id: str) -> None:
    hook = WandbHook(conn_id)
    summary = hook.get_run_summary(RUN_ID)
    assert summary == {k: v for k, v in SUMMARY.items() if k != "_wandb"}
    assert "Run" in standin.operations()
    (run_request,) = [r for r in standin.requests if r.operation == "Run"]
    assert run_request.variables == {"entity": ENTITY, "project": PROJECT, "name": RUN_ID}


def test_the_sdks_credentials_are_a_form_every_masker_knows_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:
    """The W&B SDK sends ``Basic base64("api:" + key)``: ``key_forms`` has it, and the hook
    has Airflow mask it, so a trainer's HTTP debug log shows no usable credential."""
    from airflow_volcano_wandb.airflow_compat import redact

    WandbHook(conn_id).get_run_summary(RUN_ID)
    (run_request,) = [r for r in standin.requests if r.operation == "Run"]
    sent = run_request.headers["Authorization"]
    assert sent == f"Basic {key_forms(API_KEY)[2]}"
    assert redact(f"send: Authorization: {sent}") == "send: Authorization: Basic ***"


def test_a_shared_hooks_reads_are_each_of_the_run_as_it_is_now_against_wandb_standin(
    standin: WandbStandin, conn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``wandb.Api`` answers a run it loaded from its cache: the waits' shared client loads it
    again on each read, through the one client it made (one ``Viewer``: the key checked once)."""
    from airflow_volcano_wandb.hooks import wandb as wandb_hook

    monkeypatch.setattr(wandb_hook, "_shared", {})
    standin.add_run(ENTITY, PROJECT, "training", summary={}, state="running")
    for step in (100, 200, 300):
        standin.log_step(ENTITY, PROJECT, "training", step, **{"train/step": step})
        hook = WandbHook.shared(conn_id, timeout=10, deadline=30.0)
        assert hook.get_run_summary("training")["train/step"] == step
    operations = standin.operations()
    assert (operations.count("Viewer"), operations.count("Run")) == (1, 3), operations


def test_get_run_summary_selected_keys_against_wandb_standin(
    standin: WandbStandin,
    conn_id: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    hook = WandbHook(conn_id)
    with caplog.at_level(logging.WARNING):
        picked = hook.get_run_summary(
            RUN_ID, entity=ENTITY, project=PROJECT, keys=["eval/accuracy", "eval/f1", "epoch"]
        )
    assert picked == {"eval/accuracy": 0.9375, "epoch": 10}
    assert json.loads(json.dumps(picked)) == picked  # XCom-ready
    # Airflow routes hook logs through structlog (the console here) or stdlib logging (caplog).
    captured = capfd.readouterr()
    assert "eval/f1" in caplog.text + captured.out + captured.err


def test_get_run_summary_unknown_run_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:

    with pytest.raises(wandb.errors.CommError):
        WandbHook(conn_id).get_run_summary("no-such-run")


def test_run_exists_says_no_only_when_w_and_b_says_so_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:
    hook = WandbHook(conn_id)
    assert hook.run_exists(RUN_ID) is True
    assert hook.run_exists("no-such-run") is False
    standin.api_key = "another-key-" + "0" * 40  # a refusal is no answer about the run
    with pytest.raises(wandb.errors.CommError):
        WandbHook(conn_id).run_exists(RUN_ID)


def test_get_queue_template_against_wandb_standin(standin: WandbStandin, conn_id: str) -> None:
    hook = WandbHook(conn_id)
    template = hook.get_queue_template(ENTITY, "volcano-queue")
    assert template == seed_template()
    assert hook.get_template(f"wandb-queue://{ENTITY}/volcano-queue") == template
    ops = standin.operations()
    assert "GetRunQueueMetadata" in ops and "GetDefaultResourceConfig" in ops
    meta = next(r for r in standin.requests if r.operation == "GetRunQueueMetadata")
    assert meta.variables["entityName"] == ENTITY
    assert meta.variables["runQueue"] == "volcano-queue"


def test_get_queue_reads_the_template_variables_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:
    """``wandb.Api().run_queue(...).template_variables`` as the SDK reads it: the schemas come
    with the config, and bound the run's values; a DAG's own schemas cannot replace them."""
    hook = WandbHook(conn_id)
    ref = f"wandb-queue://{ENTITY}/templated-queue"
    queue = hook.get_queue(ref)
    assert queue.template == templated_seed()
    assert [(v["name"], json.loads(v["schema"])) for v in queue.template_variable_schemas] == list(
        VARIABLES.items()
    )
    assert standin.operations().count("GetDefaultResourceConfig") == 1  # one query for both
    template, schemas = template_and_schemas(ref, None, hook)
    job = render_job(
        template,
        macros=MACROS,
        template_variables={"workers": "3", "gpus": 2},
        template_variable_schemas=schemas,
        template_namespace_allowed=True,
    )
    worker = job["spec"]["tasks"][1]
    assert worker["replicas"] == 3
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": 2
    }
    with pytest.raises(TemplateError, match="'gpus' is 3, above its maximum 2"):
        render_job(
            template,
            macros=MACROS,
            template_variables={"gpus": 3},
            template_variable_schemas=schemas,
        )
    wider = [{"name": "gpus", "schema": {"type": "integer", "maximum": 64}}]
    with pytest.raises(TemplateError, match="a DAG cannot declare or widen them"):
        template_and_schemas(ref, wider, hook)
    # A queue without variables renders as any template without them.
    assert template_and_schemas(f"wandb-queue://{ENTITY}/volcano-queue", None, hook)[1] is None


def test_get_queue_template_rejects_unusable_queues_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:
    hook = WandbHook(conn_id)
    with pytest.raises(ValueError, match="no resource config"):
        hook.get_queue_template(ENTITY, "empty-queue")
    with pytest.raises(ValueError, match="sagemaker"):
        hook.get_queue_template(None, "sagemaker-queue")  # entity from the connection
    with pytest.raises(ValueError, match="not found"):
        hook.get_template(f"wandb-queue://{ENTITY}/no-such-queue")


def test_wrong_api_key_is_rejected_by_wandb_standin(
    standin: WandbStandin, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_wandb_connection(monkeypatch, "wandb_standin_wrong_key", standin.url, password="x" * 40)
    with pytest.raises(Exception, match=r"(?i)credential|401|api key|auth"):
        WandbHook("wandb_standin_wrong_key").get_run_summary(RUN_ID, entity=ENTITY, project=PROJECT)


def _wandb_core_logs_since(start: float) -> list[Path]:
    logs = Path.home() / ".cache" / "wandb" / "logs"
    if not logs.is_dir():
        return []
    return [p for p in logs.glob("core-debug-*.log") if p.stat().st_mtime >= start - 1]


def test_api_key_sent_as_auth_but_never_logged_against_wandb_standin(
    standin: WandbStandin,
    conn_id: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    from airflow_volcano_wandb.airflow_compat import redact

    start = time.time()
    with caplog.at_level(logging.DEBUG):
        hook = WandbHook(conn_id)
        hook.get_run_summary(RUN_ID, keys=["eval/accuracy", "missing/key"])
        hook.get_queue_template(ENTITY, "volcano-queue")

    # Sent: every request carried the key as HTTP basic auth (user "api"), as W&B expects.
    assert standin.requests
    assert all(r.basic_auth_password == API_KEY for r in standin.requests)

    # Masked: Airflow's secrets masker knows the key, so task logs show *** instead.
    assert redact(f"token={API_KEY}") == "token=***"

    # Never logged: not by the hook, the SDK's Python loggers, stdout/stderr, or wandb-core.
    out, err = capfd.readouterr()
    assert API_KEY not in caplog.text
    assert API_KEY not in out and API_KEY not in err
    for log_file in _wandb_core_logs_since(start):
        assert API_KEY not in log_file.read_text(errors="replace"), log_file


def test_test_connection_against_wandb_standin(
    standin: WandbStandin, conn_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ok, message = WandbHook(conn_id).test_connection()
    assert ok, message
    assert standin.viewer_entity in message
    use_wandb_connection(monkeypatch, "wandb_standin_bad", standin.url, password="y" * 40)
    ok, message = WandbHook("wandb_standin_bad").test_connection()
    assert not ok
    assert "y" * 40 not in message


@pytest.mark.cluster
def test_the_operator_submits_a_w_and_b_queues_template_against_wandb_standin_with_a_stub_ti(
    standin: WandbStandin, conn_id: str, kubernetes_connection, volcano_cluster, volcano_namespace
) -> None:
    from airflow_volcano_wandb.airflow_compat import AirflowException
    from test_support.cluster_jobs import list_jobs
    from test_support.operator_tries import StubTaskInstance, execute_operator, operator

    queue = f"wandb-queue://{ENTITY}/volcano-queue"
    ti = StubTaskInstance("avw_standin_queue", "train", "r1")

    # The queue's own namespace (wandb) is chosen by whoever edits the queue: refused unless
    # the DAG allow-lists it; nothing is submitted.
    with pytest.raises(AirflowException, match=r"metadata\.namespace"):
        execute_operator(operator(template=queue, wandb_conn_id=conn_id), ti)
    with pytest.raises(AirflowException, match="Template error"):
        execute_operator(
            operator(template="wandb-queue://no-queue-here", wandb_conn_id=conn_id), ti
        )

    op = operator(
        template=queue,
        wandb_conn_id=conn_id,
        namespace=volcano_namespace,
        wait_for_completion=False,
    )
    submitted = execute_operator(op, ti)
    api = volcano_cluster.api_client()
    (job,) = list_jobs(api, volcano_namespace)
    assert job["metadata"]["uid"] == submitted["uid"]
    assert [t["name"] for t in job["spec"]["tasks"]] == ["master", "worker"]  # the queue's
    assert "GetDefaultResourceConfig" in standin.operations()
    api.close()


def test_the_operator_renders_a_queues_template_variables_against_wandb_standin_with_a_stub_ti(
    standin: WandbStandin, conn_id: str, kubernetes_connection, volcano_cluster, volcano_namespace
) -> None:
    """A task on a Launch queue with template variables: the queue's schemas bound the values
    whatever the DAG says; out of bounds or widened, nothing is submitted."""
    from airflow_volcano_wandb.airflow_compat import AirflowException
    from test_support.cluster_jobs import list_jobs
    from test_support.operator_tries import StubTaskInstance, execute_operator, operator

    queue = f"wandb-queue://{ENTITY}/templated-queue"
    ti = StubTaskInstance("avw_standin_variables", "train", "r1")
    api = volcano_cluster.api_client()

    def submit(**options: Any) -> dict:
        options = {"namespace": volcano_namespace, "wait_for_completion": False, **options}
        return execute_operator(operator(template=queue, wandb_conn_id=conn_id, **options), ti)

    with pytest.raises(AirflowException, match=r"(?s)Template error.*workers.*above its maximum 4"):
        submit(template_variables={"workers": 5, "gpus": 1})  # above the queue's maximum
    widened = [{"name": "workers", "schema": {"type": "integer", "maximum": 100}}]
    with pytest.raises(AirflowException, match="template_variable_schemas"):
        submit(template_variables={"workers": 50, "gpus": 1}, template_variable_schemas=widened)
    assert list_jobs(api, volcano_namespace) == []  # nothing was submitted

    submitted = submit(template_variables={"workers": 3, "gpus": 1})
    (job,) = list_jobs(api, volcano_namespace)
    assert job["metadata"]["uid"] == submitted["uid"]
    worker = job["spec"]["tasks"][1]
    assert worker["replicas"] == 3  # an integer, as the schema types it
    assert worker["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        "nvidia.com/gpu": "1"
    }
    api.close()


def test_run_artifacts_for_lineage_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:
    standin.add_artifact(RUN_ID, "used", ENTITY, "datasets", "mnist", 3, "dataset")
    standin.add_artifact(RUN_ID, "logged", ENTITY, PROJECT, "mlp", 0, "model")
    used, logged = WandbHook(conn_id).run_artifacts(RUN_ID)
    assert [(a.qualified_name, a.type) for a in used] == [
        (f"{ENTITY}/datasets/mnist:v3", "dataset")
    ]
    assert [(a.qualified_name, a.type) for a in logged] == [(f"{ENTITY}/{PROJECT}/mlp:v0", "model")]

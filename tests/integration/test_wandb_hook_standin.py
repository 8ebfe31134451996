"""WandbHook against a local HTTP stand-in for W&B's GraphQL API (no W&B server runs here).

The hook uses the real ``wandb`` SDK (``wandb.Api`` and its ``wandb-core`` helper process);
only the server is replaced, by ``test_support/wandb_standin.py``. Every test name says "standin".
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import wandb
import yaml

from airflow_volcano_wandb.hooks import WandbHook
from airflow_volcano_wandb.job.queue_template import template_and_schemas
from airflow_volcano_wandb.template import TemplateError, render_job
from airflow_volcano_wandb.wandb import wandb_backlink
from airflow_volcano_wandb.wandb.key_forms import key_forms
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import airflow_run_context

API_KEY = "standin" + "0123456789abcdef" * 3  # passes the SDK's 40+ character check
ENTITY = "ml-team"
PROJECT = "retraining"
RUN_ID = "a1b2c3d4e5f6g7h8"
SUMMARY = {
    "eval/accuracy": 0.9375,
    "train/loss": 0.0421,
    "epoch": 10,
    "_step": 99,
    "_runtime": 12.5,
    "_wandb": {"runtime": 12},
}
REPO = Path(__file__).resolve().parents[2]
MACROS = {
    "image_uri": "registry.local/ddp-mlp:1.0",
    "run_id": "r1",
    "run_name": "r1",
    "entity_name": ENTITY,
    "project_name": PROJECT,
    "author": "airflow",
}
KNOWN_OPERATIONS = {
    "Viewer",
    "GetDefaultEntity",
    "Run",
    "GetRunQueueMetadata",
    "GetDefaultResourceConfig",
    "UpsertBucket",
    "ServerFeaturesQuery",
    "RunInputArtifacts",
    "RunOutputArtifacts",
}


def seed_template() -> dict:
    for candidate in (
        REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml",
        Path("/work/shared/seed/volcano-pytorch-queue-template.yaml"),
    ):
        if candidate.exists():
            return yaml.safe_load(candidate.read_text())
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "wandb-job-${run_id}"},
        "spec": {"tasks": [{"name": "master", "replicas": 1}]},
    }


#: A queue admin's guardrails, as declared in W&B (``create_run_queue(template_variables=)``).
VARIABLES = {
    "workers": {"type": "integer", "minimum": 1, "maximum": 4, "default": 1},
    "gpus": {"type": "integer", "minimum": 0, "maximum": 2, "description": "GPUs per rank"},
}


def templated_seed() -> dict:
    """The seed with its worker count and GPUs replaced by W&B template variables."""
    template = seed_template()
    worker = template["spec"]["tasks"][1]
    worker["replicas"] = "{{workers}}"
    container = worker["template"]["spec"]["containers"][0]
    container["resources"] = {"limits": {"nvidia.com/gpu": "{{gpus}}"}}
    return template


@pytest.fixture
def standin():
    with WandbStandin(api_key=API_KEY) as server:
        server.add_run(ENTITY, PROJECT, RUN_ID, summary=SUMMARY, config={"lr": 0.01})
        server.add_queue(ENTITY, "volcano-queue", config=seed_template())
        server.add_queue(
            ENTITY, "templated-queue", config=templated_seed(), template_variables=VARIABLES
        )
        server.add_queue(ENTITY, "empty-queue", config=None)
        server.add_queue(ENTITY, "sagemaker-queue", config={"x": 1}, resource="sagemaker")
        yield server
        unsupported = [op for op in server.operations() if op not in KNOWN_OPERATIONS]
        assert not unsupported, f"wandb sent operations the stand-in does not know: {unsupported}"


@pytest.fixture
def conn_id(standin: WandbStandin, monkeypatch: pytest.MonkeyPatch, request) -> str:
    # A distinct id per test: Airflow may cache connections by id within a process.
    name = f"wandb_standin_{request.node.name}".lower()
    name = "".join(c if c.isalnum() else "_" for c in name)
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{name.upper()}",
        json.dumps(
            {
                "conn_type": "wandb",
                "host": standin.url,
                "password": API_KEY,
                "extra": {"entity": ENTITY, "project": PROJECT},
            }
        ),
    )
    # The SDK must get its key from the connection, not from the test machine.
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    return name


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
    monkeypatch.setenv(
        "AIRFLOW_CONN_WANDB_STANDIN_WRONG_KEY",
        json.dumps({"conn_type": "wandb", "host": standin.url, "password": "x" * 40}),
    )
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
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
    monkeypatch.setenv(
        "AIRFLOW_CONN_WANDB_STANDIN_BAD",
        json.dumps({"conn_type": "wandb", "host": standin.url, "password": "y" * 40}),
    )
    ok, message = WandbHook("wandb_standin_bad").test_connection()
    assert not ok
    assert "y" * 40 not in message


@pytest.mark.cluster
def test_the_operator_submits_a_w_and_b_queues_template_against_wandb_standin(
    standin: WandbStandin, conn_id: str, kubernetes_connection, volcano_cluster, volcano_namespace
) -> None:
    from airflow_volcano_wandb.airflow_compat import AirflowException
    from test_support.operator_tries import StubTaskInstance, execute_operator, list_jobs, operator

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


def test_the_operator_renders_a_queues_template_variables_against_wandb_standin(
    standin: WandbStandin, conn_id: str, kubernetes_connection, volcano_cluster, volcano_namespace
) -> None:
    """A task on a Launch queue with template variables: the queue's schemas bound the values
    whatever the DAG says; out of bounds or widened, nothing is submitted."""
    from airflow_volcano_wandb.airflow_compat import AirflowException
    from test_support.operator_tries import StubTaskInstance, execute_operator, list_jobs, operator

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


TASK = airflow_run_context(
    dag_run_id="scheduled__2026-11-30",
    logical_date=None,
    task_url="http://airflow.example/dags/retrain/runs/scheduled__2026-11-30/tasks/train",
)


def _link_back(hook: WandbHook, outcome: str, **options: Any) -> bool:
    """``link_back`` of TASK's run with a key, as the operator calls it; ``options`` replace
    the run's id and the connection's entity, project and mode (None: the connection's)."""
    arguments: dict[str, Any] = {
        "run_id": RUN_ID,
        "entity": None,
        "project": None,
        "mode": None,
        "has_key": True,
        "log": logging.getLogger("test.link_back"),
    }
    return wandb_backlink.link_back(hook, TASK, outcome, **{**arguments, **options})


def test_link_back_writes_the_task_into_the_run_against_wandb_standin(
    standin: WandbStandin, conn_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    hook = WandbHook(conn_id)
    linked = _link_back(hook, "failed")
    assert linked
    run = standin.run(ENTITY, PROJECT, RUN_ID)
    assert run.config == {"lr": 0.01, "airflow": wandb_backlink.airflow_record(TASK, "failed")}
    assert run.tags == ["airflow", "airflow-failed"]
    assert run.notes.splitlines() == [
        f"Airflow task: {TASK.task_url} (DAG run {TASK.dag_run_id}, try 2: failed)"
    ]
    assert run.summary == SUMMARY  # written back as read: untouched
    # A later try that succeeds replaces the outcome: one record, one outcome tag.
    assert _link_back(hook, "success", entity=ENTITY, project=PROJECT, mode="online")
    assert run.config["airflow"]["outcome"] == "success"
    assert run.tags == ["airflow", "airflow-success"]
    assert len(run.notes.splitlines()) == 1 and run.notes.endswith("success)")
    assert API_KEY not in "".join(repr(u) for u in standin.upserts)
    captured = capfd.readouterr()
    assert API_KEY not in captured.out + captured.err


def test_link_back_of_a_resumed_try_says_so_in_the_run_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:
    """The operator hands the resume's facts from its return value (None: not known); the run
    gets them in its ``airflow`` entry and a notes line, through the W&B public API."""
    resumed = {
        "resumed_from_intent": 1,
        "resumed_from_step": 593,
        "resumed_from_checkpoint": f"/checkpoints/{RUN_ID}/step-000000593.pt",
        "resume_saved_gpu_seconds": 39505.9,
    }
    assert _link_back(
        WandbHook(conn_id),
        "success",
        entity=ENTITY,
        project=PROJECT,
        mode="online",
        resumed=resumed,
    )
    run = standin.run(ENTITY, PROJECT, RUN_ID)
    assert run.config["airflow"] == {**wandb_backlink.airflow_record(TASK, "success"), **resumed}
    assert run.notes.splitlines()[0] == (
        f"Resumed from step 593 (checkpoint /checkpoints/{RUN_ID}/step-000000593.pt): "
        "39505.9 GPU-seconds saved"
    )
    assert run.notes.splitlines()[1].startswith("Airflow task:")


def _link_back_online(
    hook: WandbHook, run_id: str, caplog: pytest.LogCaptureFixture
) -> tuple[bool, str]:
    """``link_back`` of an online run with a key: whether it linked, and what it logged."""
    with caplog.at_level(logging.INFO, logger="test.link_back"):
        linked = _link_back(hook, "success", run_id=run_id)
    return linked, caplog.text


def test_link_back_never_fails_the_task_against_wandb_standin(
    standin: WandbStandin,
    conn_id: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    linked, logged = _link_back_online(WandbHook(conn_id), "no-such-run", caplog)
    assert not linked
    assert "Could not write the Airflow link into W&B run no-such-run" in logged
    assert not standin.upserts
    assert API_KEY not in caplog.text + "".join(capfd.readouterr())


@pytest.mark.parametrize(
    ("mode", "has_key", "why"),
    [
        ("offline", True, "W&B mode is offline"),
        ("disabled", True, "W&B mode is disabled"),
        (None, False, "no W&B API key"),
    ],
)
def test_link_back_offline_is_one_clear_line_against_wandb_standin(
    standin: WandbStandin, conn_id: str, caplog: pytest.LogCaptureFixture, mode, has_key, why
) -> None:
    log = logging.getLogger("test.link_back")
    with caplog.at_level(logging.INFO, logger="test.link_back"):
        linked = wandb_backlink.link_back(
            WandbHook(conn_id),
            TASK,
            "success",
            run_id=RUN_ID,
            entity=None,
            project=None,
            mode=mode,
            has_key=has_key,
            log=log,
        )
    assert not linked
    assert [r.getMessage() for r in caplog.records] == [
        f"{why}: the Airflow task is not linked from the W&B run {RUN_ID} (the trainer still "
        "gets AVW_AIRFLOW_TASK_URL)"
    ]
    assert standin.operations() == []  # not even a connection attempt


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


@pytest.fixture
def silent_wandb(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A W&B connection to a server that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(server.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    monkeypatch.setenv(
        "AIRFLOW_CONN_WANDB_SILENT",
        json.dumps(
            {
                "conn_type": "wandb",
                "host": f"http://127.0.0.1:{server.getsockname()[1]}",
                "password": API_KEY,
                "extra": {"entity": ENTITY, "project": PROJECT},
            }
        ),
    )
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    yield "wandb_silent"
    stop.set()
    acceptor.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.timeout(120)
def test_a_silent_w_and_b_cannot_hold_the_link_back_past_the_deadline(
    silent_wandb: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's own timeout and retries alone would hold this call for minutes."""
    hook = WandbHook(silent_wandb, timeout=30, deadline=3)
    linked, logged = _link_back_online(hook, RUN_ID, caplog)
    assert not linked
    assert "TimeoutError" in logged and "within 3 s" in logged, logged
    with pytest.raises(TimeoutError, match="get_run_summary gave no answer within 3 s"):
        hook.get_run_summary(RUN_ID)

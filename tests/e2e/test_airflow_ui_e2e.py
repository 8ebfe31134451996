"""End to end: a real Airflow 3 (API server, scheduler, DAG processor, triggerer, LocalExecutor,
PostgreSQL metadata DB) runs ``dags/volcano_pytorch_manual.py`` on the local Volcano cluster, and
Debian's headless Chromium checks the Airflow UI.

The run is triggered through Airflow's REST API with ``{"worker_replicas": 3}``. To make the
deferral observable (a simulated pod runs 2 s, so the job could finish before the sensor
starts), the test cordons the cluster's nodes until it has seen the ``wait`` task
``deferred`` with its trigger assigned to the triggerer, then uncordons them: the job runs,
the triggerer's watch sees it complete, and the task resumes in a worker and succeeds.

Screenshots and every component's log go to ``test-artifacts/e2e/``.
"""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from airflow_volcano_wandb.testing.recorder import Recorder
from airflow_volcano_wandb.wandb.wandb_run import deterministic_run_id
from airflow_volcano_wandb.wandb.wandb_urls import run_url
from tests.e2e.airflow_stack import REPO, AirflowStack, wait_for
from tests.e2e.cluster_probe import get_job, nodes_cordoned, pod_env

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

DAG_ID = "volcano_pytorch_manual"
WORKERS = 3
ARTIFACTS = REPO / "test-artifacts" / "e2e"
TRIGGER_CLASSPATH = "airflow_volcano_wandb.triggers.volcano.VolcanoJobTrigger"
# The W&B connection's entity/project differ from the DAG's params on purpose: the link must
# follow what the task used (the params), not the connection's defaults.
WANDB_CONN = {
    "conn_type": "wandb",
    "extra": {"entity": "conn-entity", "project": "conn-project"},
}


@dataclass
class E2ERun:
    """What the test saw while the DAG run ran."""

    stack: AirflowStack
    namespace: str
    dag_run_id: str
    dag_run: dict[str, Any]
    params: dict[str, Any]
    wait_states: list[str] = field(default_factory=list)
    deferred_ti: dict[str, Any] | None = None
    trigger_lines_while_held: list[str] = field(default_factory=list)
    wait_log: list[dict[str, Any]] = field(default_factory=list)
    job: dict[str, Any] | None = None
    pods_by_task: dict[str, list[Any]] = field(default_factory=dict)

    def ti_path(self, task_id: str) -> str:
        return f"/dags/{DAG_ID}/dagRuns/{quote(self.dag_run_id, safe='')}/taskInstances/{task_id}"

    def task_instance(self, task_id: str) -> dict[str, Any]:
        return self.stack.api("GET", self.ti_path(task_id))

    def xcom(self, task_id: str, key: str) -> Any:
        value = self.stack.api("GET", f"{self.ti_path(task_id)}/xcomEntries/{key}")["value"]
        return json.loads(value) if isinstance(value, str) and value[:1] in "{[" else value

    def expected_wandb_url(self) -> str:
        run_id = deterministic_run_id(DAG_ID, "submit", self.dag_run_id)
        return run_url(None, self.params["wandb_entity"], self.params["wandb_project"], run_id)


@pytest.fixture(scope="module")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for old in ARTIFACTS.glob("*.png"):
        old.unlink()
    return ARTIFACTS


@pytest.fixture(scope="module")
def e2e_namespace(volcano_cluster) -> Iterator[str]:
    """Known before Airflow starts: the manual DAG's allow-list is in its configuration."""
    namespace = volcano_cluster.create_namespace("e2e-airflow")
    yield namespace
    volcano_cluster.delete_namespace(namespace)


@pytest.fixture(scope="module")
def airflow(volcano_cluster, artifacts, e2e_namespace) -> Iterator[AirflowStack]:
    home = Path(tempfile.mkdtemp(prefix="avw-e2e-airflow-"))
    log_dir = artifacts / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    stack = AirflowStack(
        home=home,
        log_dir=log_dir,
        kubeconfig=volcano_cluster.kubeconfig,
        wandb_conn=WANDB_CONN,
        extra_env={
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES": e2e_namespace,
            # The DAG's opt-in: the master's lines in the wait task's log (a screenshot shows it).
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__FOLLOW_MASTER_LOG": "True",
        },
    )
    # A SIGTERM (e.g. a CI timeout) must still run the teardowns below: raise instead of dying.
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        stack.start(timeout=240)
        yield stack
    finally:
        try:
            stack.stop()
            shutil.rmtree(home, ignore_errors=True)
        finally:
            signal.signal(signal.SIGTERM, previous)


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.fixture(scope="module")
def e2e_run(airflow: AirflowStack, volcano_cluster, e2e_namespace: str) -> Iterator[E2ERun]:
    """Trigger the manual DAG with 3 workers through the REST API and follow it to the end."""
    api_client = volcano_cluster.api_client()
    namespace = e2e_namespace
    recorder = Recorder.pods(api_client, namespace)
    job_recorder = Recorder.jobs(api_client, namespace)
    try:
        # The DAG processor parses dags/ every few seconds: wait for the DAG to be served.
        dag = wait_for(lambda: airflow.api("GET", f"/dags/{DAG_ID}"), 180, f"DAG {DAG_ID}")
        assert dag["is_paused"], "a new DAG starts paused (dags_are_paused_at_creation)"
        details = airflow.api("GET", f"/dags/{DAG_ID}/details")
        airflow.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})

        conf = {"worker_replicas": WORKERS, "namespace": namespace}
        params = {name: p["value"] for name, p in details["params"].items()} | conf
        dag_run_id = f"e2e-{uuid.uuid4().hex[:8]}"
        run = E2ERun(airflow, namespace, dag_run_id, {}, params)

        with nodes_cordoned(api_client) as release:
            airflow.trigger(DAG_ID, dag_run_id, conf)

            def deferred_with_trigger() -> dict[str, Any] | None:
                airflow.check_alive()
                ti = run.task_instance("wait")
                _note(run.wait_states, ti["state"])
                if ti["state"] in ("failed", "upstream_failed", "success"):
                    raise AssertionError(
                        f"wait ended {ti['state']} before it deferred; submit's log:\n"
                        + _text(_task_log(run, "submit"))[-4000:]
                    )
                if ti["state"] == "deferred" and ti.get("trigger") and ti.get("triggerer_job"):
                    return ti
                return None

            run.deferred_ti = wait_for(
                deferred_with_trigger, 240, "the sensor to defer to the triggerer", interval=0.5
            )
            # Let the trigger start its watch and report the job, still waiting for nodes.
            run.trigger_lines_while_held = wait_for(
                lambda: _trigger_lines(_task_log(run, "wait")),
                180,
                "the trigger to report the job from the triggerer",
                interval=1,
            )
            job = get_job(api_client, namespace, run.xcom("submit", "volcano_job")["name"])
            assert job.get("status", {}).get("state", {}).get("phase") != "Completed", job
            release()

            def run_finished() -> dict[str, Any] | None:
                airflow.check_alive()
                _note(run.wait_states, run.task_instance("wait")["state"])
                dag_run = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{dag_run_id}")
                return dag_run if dag_run["state"] in ("success", "failed") else None

            run.dag_run = wait_for(run_finished, 240, "the DAG run to finish", interval=1)
        _note(run.wait_states, run.task_instance("wait")["state"])
        # The sensor deletes the completed job: its last state is what the watch saw.
        job_recorder.stop()
        if job_recorder.error:
            raise job_recorder.error
        run.job = job_recorder.last_seen(run.xcom("submit", "volcano_job")["name"])
        (ARTIFACTS / "logs" / "volcano-job.json").write_text(json.dumps(run.job, indent=2))
        run.wait_log = _task_log(run, "wait")
        (ARTIFACTS / "logs" / "wait-task-log-via-api.jsonl").write_text(_text(run.wait_log))
        # Volcano deletes a completed job's remaining pods soon after; give the watch a beat.
        time.sleep(1)
        recorder.stop()
        if recorder.error:
            raise recorder.error
        run.pods_by_task = recorder.by_task()
        yield run
    finally:
        recorder.stop()
        job_recorder.stop()
        api_client.close()


def _task_log(run: E2ERun, task_id: str, try_number: int = 1) -> list[dict[str, Any]]:
    """The task's log lines as the UI shows them: the worker's and the triggerer's."""
    answer = run.stack.api(
        "GET", f"{run.ti_path(task_id)}/logs/{try_number}", params={"full_content": "true"}
    )
    return [
        line if isinstance(line, dict) else {"event": str(line)}
        for line in answer.get("content", [])
    ]


def _trigger_lines(lines: list[dict[str, Any]]) -> list[str]:
    """What the VolcanoJobTrigger itself logged, in the triggerer: not the master's lines it
    relays (``[<pod>] <line>``), which may come in any order around its verdict."""
    return [
        str(line["event"])
        for line in lines
        if line.get("logger") == TRIGGER_CLASSPATH and not str(line["event"]).startswith("[")
    ]


def _text(lines: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(line) for line in lines)


def _note(states: list[str], state: str | None) -> None:
    if state and (not states or states[-1] != state):
        states.append(state)


# -- the run, through the REST API and the cluster -----------------------------------------


def test_dag_run_succeeded(e2e_run: E2ERun) -> None:
    assert e2e_run.dag_run["state"] == "success", e2e_run.dag_run
    assert e2e_run.dag_run["conf"] == {"worker_replicas": WORKERS, "namespace": e2e_run.namespace}
    tis = e2e_run.stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{e2e_run.dag_run_id}/taskInstances")
    assert {ti["task_id"]: ti["state"] for ti in tis["task_instances"]} == {
        "submit": "success",
        "wait": "success",
    }


def test_sensor_deferred_and_the_triggerer_resumed_it(e2e_run: E2ERun) -> None:
    deferred = e2e_run.deferred_ti
    assert deferred is not None
    assert deferred["trigger"]["classpath"] == TRIGGER_CLASSPATH, deferred["trigger"]
    assert deferred["triggerer_job"]["job_type"] == "TriggererJob", deferred["triggerer_job"]

    # deferred -> (the trigger fires) -> scheduled/queued/running -> success, one try only:
    # the task was resumed, not retried.
    states = e2e_run.wait_states
    assert "deferred" in states and states[-1] == "success", states
    assert states.index("deferred") < len(states) - 1
    ti = e2e_run.task_instance("wait")
    assert ti["try_number"] == 1 and ti["trigger"] is None, ti
    tries = e2e_run.stack.api("GET", f"{e2e_run.ti_path('wait')}/tries")
    assert [t["state"] for t in tries["task_instances"]] == ["success"], tries

    # The trigger watched the job in the triggerer: it saw it waiting for nodes, then
    # Completed, and fired; then the resumed task ran execute_complete with that event.
    held = e2e_run.trigger_lines_while_held
    assert held and not held[0].startswith("Completed"), held
    events = [str(line.get("event")) for line in e2e_run.wait_log]
    trigger = _trigger_lines(e2e_run.wait_log)
    assert trigger[0] == held[0] and trigger[-1].startswith("Completed:"), trigger
    deferred_at = next(i for i, e in enumerate(events) if e.startswith("Pausing task as DEFERRED"))
    fired_at = events.index("Trigger fired event")
    resumed = [i for i, e in enumerate(events) if e.startswith("Volcano job ") and "Completed" in e]
    assert deferred_at < fired_at < resumed[-1], _text(e2e_run.wait_log)[-4000:]


def test_the_volcano_job_had_three_workers(e2e_run: E2ERun) -> None:
    job = e2e_run.job
    assert job is not None
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert tasks["worker"]["replicas"] == WORKERS, tasks["worker"]
    assert tasks["master"]["replicas"] == 1
    assert job["status"]["state"]["phase"] == "Completed", job["status"]
    assert job["metadata"]["namespace"] == e2e_run.namespace

    workers = e2e_run.pods_by_task.get("worker", [])
    masters = e2e_run.pods_by_task.get("master", [])
    assert len(workers) == WORKERS, sorted(e2e_run.pods_by_task)
    assert len(masters) == 1
    # Volcano's pytorch plugin wired all four pods into one DDP world.
    for pod in [*masters, *workers]:
        assert pod_env(pod).get("WORLD_SIZE") == str(WORKERS + 1), pod.metadata.name
    ranks = sorted(int(pod_env(pod)["RANK"]) for pod in [*masters, *workers])
    assert ranks == list(range(WORKERS + 1))


def test_the_wandb_link_is_set(e2e_run: E2ERun) -> None:
    expected = e2e_run.expected_wandb_url()
    links = e2e_run.stack.api("GET", f"{e2e_run.ti_path('submit')}/links")
    assert links["extra_links"] == {"W&B Run": expected}, links
    assert e2e_run.xcom("submit", "wandb_run_url") == expected
    # ...and it is the run the job logs to: the master (rank 0) carries that run id.
    (master,) = e2e_run.pods_by_task["master"]
    assert expected.endswith(f"/runs/{pod_env(master)['WANDB_RUN_ID']}")


# -- the UI, in a real browser ---------------------------------------------------------------


@pytest.fixture(scope="module")
def browser(airflow: AirflowStack, artifacts: Path):
    from tests.e2e.browser import chromium

    with chromium(log_path=artifacts / "logs" / "chromedriver.log") as driver:
        # SimpleAuthManager with all users admins: this sets the UI's JWT cookie.
        driver.get(f"{airflow.base_url}/auth/token/login?next={airflow.base_url}/")
        yield driver


@pytest.fixture
def screenshot_on_failure(browser, artifacts: Path, request):
    yield
    report = getattr(request.node, "rep_call", None)
    if report is None or report.failed:
        browser.save_screenshot(str(artifacts / f"FAILED-{request.node.name}.png"))
        (artifacts / f"FAILED-{request.node.name}.html").write_text(browser.page_source)


def test_trigger_form_shows_params_and_refuses_1000_workers(
    e2e_run: E2ERun, browser, artifacts: Path, screenshot_on_failure
) -> None:
    from tests.e2e import ui

    stack = e2e_run.stack
    dialog = ui.open_trigger_form(browser, stack.base_url, DAG_ID)
    browser.save_screenshot(str(artifacts / "01-trigger-form.png"))

    fields = ui.param_fields(dialog)
    assert fields["worker_replicas"] == {
        "title": "Worker replicas",
        "description": "Pods in the job's worker task; the master task always has one.",
        "min": "0",
        "max": "64",
        "value": "1",
    }
    assert fields["epochs"]["title"] == "Epochs"
    assert (fields["epochs"]["min"], fields["epochs"]["max"]) == ("1", "1000")
    assert fields["gpus_per_worker"]["title"] == "GPUs per worker"
    assert (fields["gpus_per_worker"]["min"], fields["gpus_per_worker"]["max"]) == ("0", "8")
    for name, title in {
        "image_uri": "Training image",
        "wandb_entity": "W&B entity",
        "wandb_project": "W&B project",
        "namespace": "Kubernetes namespace",
    }.items():
        assert fields[name]["title"] == title, fields[name]

    runs_before = stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"]

    # Typed into the field, 1000 does not stay: the field holds the maximum once left.
    assert ui.type_number(browser, dialog, "worker_replicas", "1000") == "64"
    browser.save_screenshot(str(artifacts / "02-trigger-form-1000-clamped.png"))

    # Sent anyway (through the form's Configuration JSON), Airflow refuses it and says why.
    ui.set_configuration_json(browser, dialog, {"worker_replicas": 1000})
    assert ui.field_value(dialog, "worker_replicas") == "1000"
    error = ui.submit_trigger_form_expecting_error(browser, dialog)
    browser.save_screenshot(str(artifacts / "03-trigger-form-1000-refused.png"))
    assert "1000 is greater than the maximum of 64" in error, error
    assert "worker_replicas" in error
    assert stack.api("GET", f"/dags/{DAG_ID}/dagRuns")["total_entries"] == runs_before


def test_task_instance_page_shows_the_wandb_run_link(
    e2e_run: E2ERun, browser, artifacts: Path, screenshot_on_failure
) -> None:
    from tests.e2e import ui

    href = ui.extra_link_href(
        browser, e2e_run.stack.base_url, DAG_ID, e2e_run.dag_run_id, "submit", "W&B Run"
    )
    browser.save_screenshot(str(artifacts / "04-task-instance-wandb-link.png"))
    assert href == e2e_run.expected_wandb_url()


def test_the_wait_tasks_log_shows_the_masters_lines(
    e2e_run: E2ERun, browser, artifacts: Path, screenshot_on_failure
) -> None:
    """Followed from the triggerer, the master's lines reach the wait task's log, in the API
    and on the task instance's Logs tab."""
    from tests.e2e import ui

    (master,) = e2e_run.pods_by_task["master"]
    prefix = f"[{master.metadata.name}] "
    followed = [str(line["event"]) for line in e2e_run.wait_log]
    assert any(event.startswith(prefix) for event in followed), _text(e2e_run.wait_log)[-4000:]

    shown = ui.task_log_text(
        browser, e2e_run.stack.base_url, DAG_ID, e2e_run.dag_run_id, "wait", prefix
    )
    browser.save_screenshot(str(artifacts / "05-wait-task-log-master-lines.png"))
    assert prefix in shown


def test_screenshots_were_written(artifacts: Path) -> None:
    names = sorted(p.name for p in artifacts.glob("0*.png"))
    assert names == [
        "01-trigger-form.png",
        "02-trigger-form-1000-clamped.png",
        "03-trigger-form-1000-refused.png",
        "04-task-instance-wandb-link.png",
        "05-wait-task-log-master-lines.png",
    ]
    for name in names:
        assert (artifacts / name).stat().st_size > 10_000, name

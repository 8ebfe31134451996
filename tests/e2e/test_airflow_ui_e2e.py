"""End to end: a real Airflow 3 (API server, scheduler, DAG processor, triggerer, LocalExecutor,
PostgreSQL metadata DB) runs ``dags/volcano_pytorch_manual.py`` on the local Volcano cluster, and
Debian's headless Chromium checks the Airflow UI.

The run is triggered through Airflow's REST API with 3 workers of 1 GPU each
(``manual_run.py``). To make the deferral observable, the test cordons the cluster's nodes
until it has seen the ``wait`` task ``deferred`` with its trigger assigned to the triggerer,
then uncordons them: the job's master trains for 75 s while its W&B run (the stand-in) reports
its progress, the triggerer's watch sees the job complete, and the task resumes in a worker and
succeeds.

Screenshots (each stamped with the DAG it shows, ``screenshots.py``) and every component's log
go to ``test-artifacts/e2e/``.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_support.airflow_runs import started
from test_support.wandb_standin import WandbStandin
from tests.e2e import manual_run, screenshots
from tests.e2e.airflow_stack import AirflowStack
from tests.e2e.cluster_probe import pod_env
from tests.e2e.manual_run import (
    API_KEY,
    ARTIFACTS,
    DAG_ID,
    GPUS,
    TOTAL_STEPS,
    TRIGGER_CLASSPATH,
    WORKERS,
    E2ERun,
    text,
    training_template,
    trigger_lines,
    wandb_conn,
)

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]


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
def standin() -> Iterator[WandbStandin]:
    with WandbStandin(api_key=API_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def airflow(volcano_cluster, artifacts, e2e_namespace, standin) -> Iterator[AirflowStack]:
    home = Path(tempfile.mkdtemp(prefix="avw-e2e-airflow-"))
    log_dir = artifacts / "logs"
    shutil.rmtree(log_dir, ignore_errors=True)
    stack = AirflowStack(
        home=home,
        log_dir=log_dir,
        kubeconfig=volcano_cluster.kubeconfig,
        wandb_conn=wandb_conn(standin),
        extra_env={
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES": e2e_namespace,
            # The DAG's opt-in: the master's lines in the wait task's log (a screenshot shows it).
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__FOLLOW_MASTER_LOG": "True",
            # A master that trains long enough for the progress lines (manual_run.py).
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__TEMPLATE": str(training_template(home)),
            "AIRFLOW__VOLCANO_WANDB__PROGRESS_INTERVAL": "15",
        },
    )
    with started(stack, home, timeout=240):
        yield stack


@pytest.fixture(scope="module")
def e2e_run(airflow: AirflowStack, standin, volcano_cluster, e2e_namespace: str):
    """The manual DAG's run with 3 workers, followed to its end (``manual_run.start``)."""
    with manual_run.start(airflow, standin, volcano_cluster, e2e_namespace) as run:
        yield run


# -- the run, through the REST API and the cluster -----------------------------------------


def test_dag_run_succeeded_on_the_standin(e2e_run: E2ERun) -> None:
    assert e2e_run.dag_run["state"] == "success", e2e_run.dag_run
    conf = {"worker_replicas": WORKERS, "gpus_per_worker": GPUS, "namespace": e2e_run.namespace}
    assert e2e_run.dag_run["conf"] == conf
    tis = e2e_run.stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{e2e_run.dag_run_id}/taskInstances")
    assert {ti["task_id"]: ti["state"] for ti in tis["task_instances"]} == {
        "submit": "success",
        "wait": "success",
    }


def test_sensor_deferred_and_the_triggerer_resumed_it_on_the_standin(
    e2e_run: E2ERun,
) -> None:
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
    trigger = trigger_lines(e2e_run.wait_log)
    assert trigger[0] == held[0] and trigger[-1].startswith("Completed:"), trigger
    deferred_at = next(i for i, e in enumerate(events) if e.startswith("Pausing task as DEFERRED"))
    fired_at = events.index("Trigger fired event")
    resumed = [i for i, e in enumerate(events) if e.startswith("Volcano job ") and "Completed" in e]
    assert deferred_at < fired_at < resumed[-1], text(e2e_run.wait_log)[-4000:]


def test_the_volcano_job_had_three_workers_on_the_standin(e2e_run: E2ERun) -> None:
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


def test_the_wandb_link_is_set_on_the_standin(e2e_run: E2ERun) -> None:
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


def test_trigger_form_shows_params_and_refuses_1000_workers_on_the_standin(
    e2e_run: E2ERun, browser, artifacts: Path, screenshot_on_failure
) -> None:
    from tests.e2e import ui

    stack = e2e_run.stack
    dialog = ui.open_trigger_form(browser, stack.base_url, DAG_ID)
    browser.save_screenshot(str(artifacts / "01-trigger-form.png"))
    # What the picture shows of the form, so the README's caption names only that.
    shown, every = screenshots.visible_field_titles(browser, dialog)
    assert shown and set(shown) < set(every), (shown, every)
    screenshots.stamp_shows(artifacts / "01-trigger-form.png", shown, every)

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


def test_task_instance_page_shows_the_wandb_run_link_on_the_standin(
    e2e_run: E2ERun, browser, artifacts: Path, screenshot_on_failure
) -> None:
    from tests.e2e import ui

    href = ui.extra_link_href(browser, *e2e_run.page(), "submit", "W&B Run")
    browser.save_screenshot(str(artifacts / "04-task-instance-wandb-link.png"))
    assert href == e2e_run.expected_wandb_url()


def test_the_wait_tasks_log_shows_the_masters_lines_on_the_standin(
    e2e_run: E2ERun, browser, artifacts: Path, screenshot_on_failure
) -> None:
    """Followed from the triggerer, the master's lines reach the wait task's log, in the API
    and on the task instance's Logs tab."""
    from tests.e2e import ui

    (master,) = e2e_run.pods_by_task["master"]
    prefix = f"[{master.metadata.name}] "
    followed = [str(line["event"]) for line in e2e_run.wait_log]
    assert any(event.startswith(prefix) for event in followed), text(e2e_run.wait_log)[-4000:]
    # Followed once: the resumed task does not show the followed lines again as a tail.
    master_lines = [event for event in followed if event.startswith(prefix)]
    assert len(master_lines) == len(set(master_lines)), "\n".join(master_lines)

    shown = ui.task_log_text(browser, *e2e_run.page(), "wait", prefix)
    browser.save_screenshot(str(artifacts / "05-wait-task-log-master-lines.png"))
    assert prefix in shown


PROGRESS = re.compile(
    rf"^progress: step (\d+)/{TOTAL_STEPS} \((\d+) %\), epoch \d/3, [\d.]+ steps/s, "
    r"ETA [\d.]+ (s|min), eval/accuracy=[\d.]+$"
)


def test_the_wait_tasks_log_shows_the_trainings_progress_and_a_working_wandb_on_the_standin(
    e2e_run: E2ERun,
) -> None:
    """From the triggerer, with no master log read for it: at least two progress lines, the
    percentage rising, each with a rate and an ETA; then the run's summary, the link back from
    W&B and the GPU-hours, as a working setup shows them."""
    events = [str(line.get("event")) for line in e2e_run.wait_log]
    shown = [m for event in events if (m := PROGRESS.match(event))]
    assert len(shown) >= 2, "\n".join(e for e in events if "progress" in e)
    percents = [int(m[2]) for m in shown]
    assert percents == sorted(percents) and percents[0] < percents[-1], percents
    log = "\n".join(events)
    for missing in ("Could not read the W&B run's summary", "not linked from the W&B run"):
        assert missing not in log, log[-4000:]
    gpu_hours = re.search(r"([\d.]+) GPU-hours", log)
    assert gpu_hours and float(gpu_hours[1]) > 0, log[-4000:]
    assert e2e_run.xcom("wait", "wandb_summary") == manual_run.FINAL_SUMMARY


def test_the_wait_tasks_log_view_shows_the_progress_lines_on_the_standin(
    e2e_run: E2ERun, browser, artifacts: Path, screenshot_on_failure
) -> None:
    from tests.e2e import ui

    shown = ui.task_log_text(browser, *e2e_run.page(), "wait", "progress: step")
    browser.save_screenshot(str(artifacts / "06-wait-task-log-progress.png"))
    assert "ETA" in shown


def test_screenshots_were_written_and_stamped_with_the_dag_they_show(artifacts: Path) -> None:
    names = sorted(p.name for p in artifacts.glob("0*.png"))
    assert names == [
        "01-trigger-form.png",
        "02-trigger-form-1000-clamped.png",
        "03-trigger-form-1000-refused.png",
        "04-task-instance-wandb-link.png",
        "05-wait-task-log-master-lines.png",
        "06-wait-task-log-progress.png",
    ]
    digest = screenshots.dag_digest()
    for name in names:
        assert (artifacts / name).stat().st_size > 10_000, name
        screenshots.stamp(artifacts / name, digest)
        assert screenshots.stamped_digest(artifacts / name) == digest

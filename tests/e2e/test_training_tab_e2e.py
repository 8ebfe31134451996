"""The Training tab and page (issue 55) on the production-shaped Airflow (PostgreSQL, the API
server, scheduler, DAG processor, triggerer) under the FAB auth manager, with the local Volcano
cluster and the W&B stand-in feeding the run's metrics.

Debian's Chromium, signed in as an admin, opens the submit task's Training tab while the job
trains: the ranks placed on their nodes, the bar moving, the metrics' chart drawn; the
Training page lists the job with its progress bar; the sensor's tab links to the W&B run; after
the run, the wait task's tab, opened then, shows the last state from what the task kept (the
pods are gone) and the chart of the run's whole W&B history. Two users, each allowed to read
one DAG, read through the tab's API only the job of their DAG. What is simulated: the pods
(KWOK) and the W&B server. Marked ``long`` (about 4 minutes): ``make test-long``, or name the file.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from airflow_volcano_wandb.wandb.wandb_run import deterministic_run_id
from test_support.airflow_runs import started
from test_support.wandb_standin import WandbStandin
from tests.e2e import screenshots
from tests.e2e.airflow_stack import REPO, AirflowStack, wait_for
from tests.e2e.manual_run import API_KEY, DAG_ID, TRAINS_FOR, training_template, wandb_conn

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.long]

ARTIFACTS = REPO / "test-artifacts" / "training-tab"
FAB = "airflow.providers.fab.auth_manager.fab_auth_manager.FabAuthManager"
OTHER_DAG = "volcano_pytorch_sweep"
#: Each user, their role and the DAG it may read (the admin: every DAG).
USERS = {
    "admin": ("Admin", None),
    "alice": ("reads_manual", DAG_ID),
    "bob": ("reads_sweep", OTHER_DAG),
}
PASSWORD = "avw-" + uuid.uuid4().hex
TOTAL_STEPS = 1200
TAB = "/avw-training"
#: The README's picture of the tab (``make screenshots`` copies it to docs/images/).
PICTURE = "07-training-tab.png"


@dataclass
class Training:
    stack: AirflowStack
    run_id: str
    entity: str
    project: str
    standin: WandbStandin

    @property
    def wandb_run(self) -> str:
        return deterministic_run_id(DAG_ID, "submit", self.run_id)

    def logged(self, metric: str) -> int:
        """How many rows of the W&B run's history hold ``metric``."""
        run = self.standin.run(self.entity, self.project, self.wandb_run)
        return sum(metric in row for row in (run.history if run else []))

    def api_path(self, task_id: str, dag_id: str = DAG_ID) -> str:
        return f"{TAB}/api/ti/{dag_id}/{self.run_id}/{task_id}/-1"

    def tab_url(self, task_id: str) -> str:
        page = f"/dags/{DAG_ID}/runs/{self.run_id}/tasks/{task_id}"
        return f"{self.stack.base_url}{page}/plugin/avw-training"


@pytest.fixture(scope="module")
def namespace_and_standin(volcano_cluster) -> Iterator[tuple[str, WandbStandin]]:
    """The jobs' namespace (the manual DAG's allow-list names it) and the W&B stand-in."""
    name = volcano_cluster.create_namespace("training-tab")
    try:
        with WandbStandin(api_key=API_KEY) as server:
            yield name, server
    finally:
        volcano_cluster.delete_namespace(name)


@pytest.fixture(scope="module")
def airflow(volcano_cluster, namespace_and_standin) -> Iterator[AirflowStack]:
    namespace, standin = namespace_and_standin
    home = Path(tempfile.mkdtemp(prefix="avw-tab-airflow-"))
    shutil.rmtree(ARTIFACTS, ignore_errors=True)
    ARTIFACTS.mkdir(parents=True)
    stack = AirflowStack(
        home=home,
        log_dir=ARTIFACTS / "logs",
        kubeconfig=volcano_cluster.kubeconfig,
        wandb_conn=wandb_conn(standin),
        extra_env={
            "AIRFLOW__CORE__AUTH_MANAGER": FAB,
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES": namespace,
            "AIRFLOW__VOLCANO_PYTORCH_MANUAL__TEMPLATE": str(training_template(home)),
            "AIRFLOW__VOLCANO_WANDB__PROGRESS_INTERVAL": "5",
        },
    )
    with started(stack, home, timeout=300):
        _add_user(stack, "admin")
        stack._token = token(stack, "admin")
        for dag_id in (DAG_ID, OTHER_DAG):
            wait_for(lambda d=dag_id: stack.api("GET", f"/dags/{d}"), 240, f"DAG {dag_id}")
        _add_roles(stack)
        yield stack


def _airflow(stack: AirflowStack, *args: str) -> None:
    argv = [sys.executable, "-m", "airflow", *args]
    done = subprocess.run(argv, env=stack._env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, f"airflow {' '.join(args[:2])}: {done.stderr[-2000:]}"


def _add_user(stack: AirflowStack, user: str) -> None:
    _airflow(
        stack, "users", "create", "--username", user, "--password", PASSWORD,
        "--role", USERS[user][0], "--email", f"{user}@example.org", "--firstname", user,
        "--lastname", "test",
    )  # fmt: skip


def _add_roles(stack: AirflowStack) -> None:
    """Two roles, each reading one DAG's runs and task instances, and a user of each, through
    FAB's REST API as the admin (a CLI call takes a minute on a loaded machine)."""
    _airflow(stack, "sync-perm", "--include-dags")  # the DAG:<dag_id> resources
    for user, (role, dag_id) in USERS.items():
        if not dag_id:
            continue
        resources = [f"DAG:{dag_id}", "Task Instances", "DAG Runs"]
        actions = [{"action": {"name": "can_read"}, "resource": {"name": r}} for r in resources]
        _fab(stack, "POST", "/roles", {"name": role, "actions": actions})
        body = {"username": user, "email": f"{user}@example.org", "first_name": user}
        body |= {"last_name": "test", "roles": [{"name": role}], "password": PASSWORD}
        _fab(stack, "POST", "/users", body)


def _fab(stack: AirflowStack, method: str, path: str, body: dict) -> None:
    answer = httpx.request(
        method,
        f"{stack.base_url}/auth/fab/v1{path}",
        json=body,
        headers={"Authorization": f"Bearer {stack._token}"},
        timeout=60,
    )
    assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text}"


_TOKENS: dict[str, str] = {}


def token(stack: AirflowStack, user: str) -> str:
    """A JWT of ``user`` from FAB's login (once each: a login hashes the password)."""
    if user in _TOKENS:
        return _TOKENS[user]
    answer = httpx.post(
        f"{stack.base_url}/auth/token", json={"username": user, "password": PASSWORD}, timeout=60
    )
    answer.raise_for_status()
    _TOKENS[user] = answer.json()["access_token"]
    return _TOKENS[user]


def get(stack: AirflowStack, user: str | None, path: str) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token(stack, user)}"} if user else {}
    return httpx.get(f"{stack.base_url}{path}", headers=headers, timeout=60)


def report_training(run: Training, where: tuple[str, str, str], done: threading.Event):
    """The trainer's W&B run: once the job runs (as the tab's API says: on a loaded machine the
    job may be submitted minutes after the DAG run starts), its step, a falling loss and a
    rising accuracy every second."""
    standin, step = run.standin, 0
    while not done.wait(1.0) and not _job_runs(run):
        pass
    while not done.wait(1.0) and step < TOTAL_STEPS:
        step = min(TOTAL_STEPS, step + TOTAL_STEPS // (TRAINS_FOR - 20))
        standin.log_step(
            *where, step, **{"train/step": step, "train/total_steps": TOTAL_STEPS,
            "train/loss": round(2.5 * (1 - step / TOTAL_STEPS) + 0.1, 4),
            "eval/accuracy": round(0.5 + 0.45 * step / TOTAL_STEPS, 4)},
        )  # fmt: skip
    standin.log_step(*where, step, **{"eval/accuracy": 0.95, "eval/loss": 0.12})


def _job_runs(run: Training) -> bool:
    answer = get(run.stack, "admin", run.api_path("submit"))
    return answer.status_code == 200 and answer.json()["job"]["phase"] == "Running"


@pytest.fixture(scope="module")
def training(airflow: AirflowStack, namespace_and_standin) -> Iterator[Training]:
    """The manual DAG's run with 2 workers, its W&B run training while the test looks."""
    namespace, standin = namespace_and_standin
    airflow.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
    details = airflow.api("GET", f"/dags/{DAG_ID}/details")["params"]
    run = Training(
        airflow,
        f"tab-{uuid.uuid4().hex[:8]}",
        details["wandb_entity"]["value"],
        details["wandb_project"]["value"],
        standin,
    )
    where = (run.entity, run.project, run.wandb_run)
    standin.add_run(*where, summary={}, state="running")
    conf = {"worker_replicas": 2, "gpus_per_worker": 1, "namespace": namespace}
    airflow.trigger(DAG_ID, run.run_id, conf)
    done = threading.Event()
    reporter = threading.Thread(target=report_training, args=(run, where, done), daemon=True)
    reporter.start()
    try:
        yield run
    finally:
        done.set()


def dag_run_state(run: Training) -> str:
    return run.stack.api("GET", f"/dags/{DAG_ID}/dagRuns/{run.run_id}")["state"]


def test_two_users_read_only_the_job_of_the_dag_they_may_read_on_the_standin(
    training: Training,
) -> None:
    stack = training.stack

    def alices() -> dict | None:
        assert dag_run_state(training) != "failed", "the DAG run failed"
        answer = get(stack, "alice", training.api_path("submit"))
        return answer.json() if answer.status_code == 200 and answer.json()["found"] else None

    mine = wait_for(alices, 240, "alice's model of the submit task's job", interval=3)
    assert mine["job"]["name"] and mine["job"]["namespace"].startswith("training-tab")
    # bob may read the sweep DAG only: the manual DAG's job is refused, page and API.
    for path in (training.api_path("submit"), training.api_path("submit").replace("/api/", "/")):
        assert get(stack, "bob", path).status_code == 403, path
        assert get(stack, None, path).status_code in (401, 403), path
    # ... and he may read his own DAG's (this task instance does not exist: 404, not 403).
    assert get(stack, "bob", training.api_path("train", OTHER_DAG)).status_code == 404
    assert get(stack, "alice", training.api_path("train", OTHER_DAG)).status_code == 403
    # The Training page lists for each only the DAGs they may read.
    alices = get(stack, "alice", f"{TAB}/api/jobs").json()
    bobs = get(stack, "bob", f"{TAB}/api/jobs").json()
    assert alices["dag_ids"] == [DAG_ID] and bobs["dag_ids"] == [OTHER_DAG]
    assert all(row["dag_id"] == DAG_ID for row in alices["jobs"])
    assert bobs["jobs"] == []
    assert get(stack, "bob", f"{TAB}/api/jobs?dag_id={DAG_ID}").json()["jobs"] == []
    # Nothing the tab answers holds the W&B key.
    for user in ("alice", "admin"):
        for path in (training.api_path("submit"), training.api_path("wait"), f"{TAB}/api/jobs"):
            assert API_KEY not in get(stack, user, path).text


@pytest.fixture(scope="module")
def browser(airflow: AirflowStack):
    from tests.e2e.browser import chromium

    with chromium(log_path=ARTIFACTS / "logs" / "chromedriver.log") as driver:
        driver.get(f"{airflow.base_url}/api/v2/version")  # the cookie's origin
        driver.add_cookie({"name": "_token", "value": token(airflow, "admin"), "path": "/"})
        yield driver


def _in_tab(driver, url: str) -> None:
    """Open the task instance's Training tab and switch into its frame."""
    from selenium.webdriver.common.by import By

    driver.switch_to.default_content()
    driver.get(url)
    frame = wait_for(lambda: driver.find_elements(By.TAG_NAME, "iframe"), 60, "the tab's frame")
    driver.switch_to.frame(frame[0])
    wait_for(lambda: driver.execute_script("return document.body.dataset.refreshed"), 60, "a draw")


def _shown(driver) -> dict[str, Any]:
    return driver.execute_script(
        """const t = id => document.getElementById(id).textContent;
        return {phase: t('job-phase'), progress: t('progress-text'), pending: t('pending'),
          bar: document.getElementById('progress-bar').style.width,
          ranks: [...document.querySelectorAll('#ranks tbody tr')].map(r =>
            [...r.cells].map(c => c.textContent)),
          points: [...document.querySelectorAll('#chart polyline')].map(p =>
            [p.dataset.metric, p.getAttribute('points').split(' ').length]),
          waiting: document.body.dataset.waiting, gpu_hours: t('gpu-hours'),
          wandb_link: document.getElementById('wandb-link').hidden ? null
            : document.getElementById('wandb-link').href};"""
    )


def _bars(driver) -> list[tuple[str, str]] | None:
    """The Training page's rows of the DAG that show progress: each bar's width and text."""
    return (
        driver.execute_script(
            """return [...document.querySelectorAll(`#jobs tbody tr[data-dag='${arguments[0]}']
          td.progress`)].map(td => [td.querySelector('.bar > div').style.width, td.textContent])
          .filter(([width]) => width && width !== '0%');""",
            DAG_ID,
        )
        or None
    )


def test_the_tab_shows_the_training_live_then_its_last_state_in_chromium_on_the_standin(
    training: Training, browser
) -> None:
    _in_tab(browser, training.tab_url("submit"))

    def training_shown() -> dict[str, Any] | None:
        shown = _shown(browser)
        placed = len(shown["ranks"]) == 3 and all(row[2] for row in shown["ranks"])
        charted = any(n >= 3 for _, n in shown["points"])
        return shown if shown["phase"] == "Running" and placed and charted else None

    first = wait_for(training_shown, 240, "the ranks placed and the chart drawn", interval=1)
    assert sorted(row[0] for row in first["ranks"]) == ["master-0", "worker-0", "worker-1"]
    assert {metric for metric, _ in first["points"]} >= {"train/loss"}
    later = wait_for(
        lambda: (s := _shown(browser))["bar"] != first["bar"] and s, 60, "the bar to move"
    )
    assert "steps/s" in later["progress"] and later["waiting"] == "true"
    browser.save_screenshot(str(ARTIFACTS / PICTURE))
    screenshots.stamp(ARTIFACTS / PICTURE, screenshots.dag_digest())

    # The Training page lists the job while its wait task waits.
    browser.switch_to.default_content()
    browser.get(f"{training.stack.base_url}{TAB}/")
    bars = wait_for(lambda: _bars(browser), 60, "the job's bar on the Training page")
    assert all(text.startswith("step ") and "%" in text for _, text in bars), bars
    # The sensor's tab links to the W&B run while it waits (the run from the job's label).
    wait_model = get(training.stack, "admin", training.api_path("wait")).json()
    assert training.wandb_run in (wait_model["links"]["wandb_run"] or ""), wait_model["links"]

    wait_for(lambda: dag_run_state(training) in ("success", "failed"), 300, "the run's end", 2)
    assert dag_run_state(training) == "success"
    _in_tab(browser, training.tab_url("wait"))
    last = wait_for(
        lambda: (s := _shown(browser))["waiting"] == "false" and s, 60, "the last state"
    )
    assert last["phase"] in ("Completed", "gone"), last
    assert float(last["gpu_hours"]) > 0 and last["pending"] == ""
    # The chart of a tab opened after the run is the W&B run's whole history, not what some
    # page saw: one point per row that logged the loss.
    assert dict(last["points"])["train/loss"] == training.logged("train/loss") > 10, last
    assert last["wandb_link"] and training.wandb_run in last["wandb_link"], last
    browser.save_screenshot(str(ARTIFACTS / "08-training-tab-ended.png"))

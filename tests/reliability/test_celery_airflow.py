"""The manual DAG on CeleryExecutor, the Helm chart's default, with every task log read through
Airflow's log servers (issue 54, goal 1).

The stack (``running_stack(executor="celery")``): PostgreSQL (metadata DB and Celery's result
backend), Redis (the broker), the API server, two schedulers, the DAG processor, two
triggerers and two Celery workers. Each worker and triggerer is as on a machine of its own: a
host name, a log folder and a log server of its own (``tests/e2e/executors.py``), so the API
server, which has a folder of its own too, can only serve a task's log through the log server
of the host that wrote it, as in the chart, where no folder is shared.

Two runs start together: the manual DAG triggered with a form's params (replicas, GPUs, epochs),
its master training for up to ``manual_run.TRAINS_FOR`` seconds while its W&B run on the
stand-in reports progress, ended by the test once the trigger's lines are served; and a
deferrable operator whose job fails once the task has deferred. Then, on the same stack, the
worker kill trials: a Celery worker SIGKILLed (with its task process: a node or pod lost) while
its task is in the ``defer_after`` window, then the worker that ran the next try SIGKILLed once
that try has deferred. Each worker is started again at once, as its Deployment would. What is
simulated: the pods (KWOK), the trainer and the W&B server.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from airflow_volcano_wandb.wandb.wandb_run import deterministic_run_id
from airflow_volcano_wandb.wandb.wandb_urls import run_url
from test_support import training_report
from test_support.airflow_runs import DAGS, ENDED, MANUAL_DAG, Run, running_stack, start_run
from test_support.cluster_jobs import SIM_DURATION, end_master, failing_template, seed_template
from test_support.wandb_standin import WandbStandin
from tests.e2e import manual_run
from tests.e2e.airflow_stack import REPO, AirflowStack, command_of, wait_for

# The stack's start (about 1 min on a quiet machine, more when loaded), both runs at once (the
# training until the trigger's lines are served, after a submission and a 15 s window), then
# the kill trial (56 s at a load average of 8 on 2 cores, 207 s at 22: its time is mostly task
# starts, which load slows).
pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(1200)]

#: The form's values: 2 workers of 2 GPUs each, 4 epochs.
FORM = {"worker_replicas": 2, "gpus_per_worker": 2, "epochs": 4}
ENTITY, PROJECT = "airflow", "volcano-ddp"  # the manual DAG's defaults
TRIGGER_LOGGER = manual_run.TRIGGER_CLASSPATH
PROGRESS = re.compile(rf"^progress: step \d+/{manual_run.TOTAL_STEPS} \(\d+ %\)")
MASTER_LINE = re.compile(r"^\[\S+-master-0\] ")
#: The failing job's master exits 3 this long after it starts: after the task's window.
FAILS_AFTER = "35"
#: A running task whose worker died is failed (and retried) once its last heartbeat is this
#: old. Airflow's default, 300 s, is what a deployment waits; 20 s keeps the trial short and
#: still leaves a live task's heartbeats (every 5 s) room on a loaded machine.
HEARTBEAT_TIMEOUT = "20"
#: The kill trial's DAG (tests/reliability/dags/avw_celery_dags.py): one retry, a 10 s window.
RETRIED_DAG = "avw_rel_celery_retried"
#: Its master trains until the trial ends it (``end_master``), after the second kill: however
#: slow the retry is to start, the job still runs when try 2 defers.
KILL_TRIAL_TRAINS_FOR = "600"


@pytest.fixture(scope="module")
def standin() -> Iterator[WandbStandin]:
    with WandbStandin(api_key=manual_run.API_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def celery_airflow(volcano_cluster, standin, tmp_path_factory) -> Iterator[AirflowStack]:
    """The Celery stack, with the reliability DAGs and the manual DAG, whose master trains
    ``TRAINS_FOR`` seconds and whose wait task follows the master's log."""
    folder = tmp_path_factory.mktemp("celery-dags")
    shutil.copytree(DAGS, folder, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "dags" / "volcano_pytorch_manual.py", folder)
    shutil.copytree(REPO / "dags" / "templates", folder / "templates")
    namespace = volcano_cluster.create_namespace("celery-manual")
    env = {
        "AIRFLOW__VOLCANO_PYTORCH_MANUAL__FOLLOW_MASTER_LOG": "True",
        "AIRFLOW__VOLCANO_PYTORCH_MANUAL__TEMPLATE": str(manual_run.training_template(folder)),
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": HEARTBEAT_TIMEOUT,
        "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "2",
    }
    try:
        with running_stack(
            volcano_cluster,
            "celery-airflow-logs",
            dags_folder=folder,
            manual_namespace=namespace,
            executor="celery",
            wandb_conn=manual_run.wandb_conn(standin),
            extra_env=env,
        ) as stack:
            yield stack
    finally:
        volcano_cluster.delete_namespace(namespace)


@pytest.fixture(scope="module")
def runs(celery_airflow, volcano_cluster, standin) -> Iterator[dict[str, Run]]:
    """Both runs, triggered together (so the trial waits for the longer one only)."""
    with volcano_cluster.api_client() as api:
        manual = start_run(
            celery_airflow, volcano_cluster, api, MANUAL_DAG, "celery-manual", FORM, task_id="wait"
        )
        standin.add_run(ENTITY, PROJECT, _wandb_run_id(manual), summary={}, state="running")
        template = failing_template(FAILS_AFTER)
        failing = start_run(
            celery_airflow, volcano_cluster, api, "avw_rel_deferred", "celery-fails",
            {"template": template},
        )  # fmt: skip
        try:
            yield {"manual": manual, "failing": failing}
        finally:
            for run in (manual, failing):
                run.watched.stop()
            volcano_cluster.delete_namespace(failing.watched.namespace)


def _wandb_run_id(run: Run) -> str:
    return deterministic_run_id(MANUAL_DAG, "submit", run.run_id)


def test_the_manual_dag_on_celery_serves_the_triggerers_lines_through_its_log_server_on_the_standin(
    celery_airflow: AirflowStack, runs: dict[str, Run], standin: WandbStandin
) -> None:
    stack, run = celery_airflow, runs["manual"]
    where = (ENTITY, PROJECT, _wandb_run_id(run))
    with training_report.reporting(
        standin,
        [where],
        starts=lambda _: _job_running(run),
        reports_for=manual_run.REPORTS_FOR,
        total_steps=manual_run.TOTAL_STEPS,
        final_summary=manual_run.FINAL_SUMMARY,
    ):
        run.wait_deferred(timeout=300)
        deferred, sources, lines = wait_for(
            lambda: _lines_while_deferred(run), manual_run.TRAINS_FOR + 120, "the trigger's lines"
        )
    # The run logged its final summary (leaving the block, as ``run.finish()``): the training
    # ends now that both kinds of lines were served, not after its whole pace.
    end_master(run.watched.api, run.watched.namespace)
    ti = run.expect_success()

    # The sensor waited its window in a worker before it deferred (that worker's own log).
    window = "still runs after 15s: deferring to the triggerer"
    assert any(window in path.read_text() for path in _written_by(stack, "worker", run, "wait"))

    # While deferred, the API server served the lines of the triggerer that ran the trigger,
    # from that triggerer's log server: its own folder holds no log at all.
    triggerer = stack.component_of_job(deferred["triggerer_job"]["id"])
    host = stack.host_of(triggerer)
    assert command_of(triggerer) == "triggerer" and host != "127.0.0.1", triggerer
    assert len(sources) == 1 and sources[0].startswith(f"http://{host}:"), sources
    assert ".trigger." in sources[0], sources
    assert not _files(stack.task_log_folder("api-server")), _files(
        stack.task_log_folder("api-server")
    )
    written = "\n".join(p.read_text() for p in _files(stack.task_log_folder(triggerer)))
    for line in lines:
        assert line in written, f"{line!r} is not in {triggerer}'s own log folder"

    # The job the submit task created (written whole to its log before the create, read here
    # through the worker's log server) asks for the form's replicas, GPUs and epochs.
    log = run.task_log(1, "submit", lines=100_000)
    job = yaml.safe_load(log[log.index("---\n") : log.index("\n...\n") + 5])
    assert [t["replicas"] for t in job["spec"]["tasks"]] == [1, 2]
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 2, container
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert json.loads(env["WANDB_CONFIG"]) == {"epochs": 4}, env
    links = stack.api("GET", f"{run.ti_path_of('submit')}/links")
    assert links["extra_links"] == {"W&B Run": run_url(standin.url, *where)}, links

    # Once it ended, Airflow serves the worker's log alone (no remote logging): the resumed
    # task's own lines carry what the wait found.
    sources, lines = _served(run, "wait")
    events = _events(lines)
    worker = _component_of_host(stack, ti["hostname"])
    assert command_of(worker) == "worker", (ti["hostname"], worker)
    assert len(sources) == 1 and sources[0].startswith(f"http://{ti['hostname']}:"), sources
    assert any("GPU-hours" in event for event in events), "\n".join(events)[-4000:]
    assert run.xcom("wandb_summary") == manual_run.FINAL_SUMMARY


def test_a_failing_job_on_celery_ends_with_its_typed_failure_beside_the_standin(
    runs: dict[str, Run],
) -> None:
    run = runs["failing"]
    ti = run.wait_ended(timeout=300)
    sources, lines = _served(run, "train")
    events = _events(lines)
    shown = "\n".join(events)[-4000:]
    assert (ti["state"], ti["try_number"]) == ("failed", 1), shown
    # The job failed while the task was deferred: a triggerer wrote the trigger's log...
    triggered = [
        p for p in _written_by(run.stack, "triggerer", run, "train") if ".trigger." in p.name
    ]
    assert triggered, "the task never deferred"
    # ...and the resumed task, served from its worker, failed with the failure's type.
    assert sources[0].startswith(f"http://{ti['hostname']}:"), sources
    assert "Failing with TrainerExitError" in events, shown
    assert len(run.watched.seen) == 1, run.watched.seen  # one job: nothing submitted twice


def test_celery_workers_sigkilled_in_the_window_and_after_deferring_keep_one_job_on_the_standin(
    celery_airflow: AirflowStack, volcano_cluster
) -> None:
    """A worker crash is no kill: the job stays, try 2 reattaches to it and trains on. The
    first kill takes the worker's process group only, as the OOM killer or a node agent
    would: Airflow's task runner (a process group of its own) is orphaned in its window and
    fails on its supervisor's closed channel, which must not delete the job; the second
    takes the worker with every process under it, as a lost pod."""
    stack = celery_airflow
    template = seed_template(
        master={SIM_DURATION: KILL_TRIAL_TRAINS_FOR}, worker={SIM_DURATION: "600"}
    )
    with volcano_cluster.api_client() as api:
        run = start_run(
            stack, volcano_cluster, api, RETRIED_DAG, "celery-kill", {"template": template}
        )
        try:
            started = time.monotonic()
            # Try 1 in its window: running on a worker, its job created, not yet deferred.
            ti = wait_for(lambda: _in_window(run), 300, "try 1 in its window", interval=0.2)
            first = _sigkill_worker(stack, ti, runner_too=False)
            master = wait_for(lambda: _master_pod(api, run), 60, "the master pod")
            # Try 1's heartbeat lapses, the scheduler fails it for a retry; try 2 reattaches.
            ti = wait_for(lambda: _deferred_try(run, 2), 300, "try 2 to defer")
            retried_after = time.monotonic() - started
            second = _sigkill_worker(stack, ti, runner_too=True)
            still = _master_pod(api, run)
            end_master(api, run.watched.namespace)  # the training ends: try 2 resumes
            ti = run.expect_success(try_number=2)
        finally:
            run.watched.stop()
            volcano_cluster.delete_namespace(run.watched.namespace)
    # One job ever, its master pod the same and never restarted: no training lost or repeated.
    assert len(run.watched.seen) == 1, run.watched.seen
    assert still and (still["uid"], still["restarts"]) == (master["uid"], 0), (master, still)
    # Try 2's first half, in the folder of the worker that ran it (Airflow serves only the
    # resumed half's worker, as docs/helm.md says), reattached.
    tries = [p for p in _written_by(stack, "worker", run, "train") if p.name == "attempt=2.log"]
    assert any("Reattaching to running Volcano job" in p.read_text() for p in tries), tries
    # The resumed try ran on a worker after the second kill: the same try, nothing repeated.
    assert ti["try_number"] == 2 and ti["hostname"], ti
    print(f"killed {first} in the window, {second} after the deferral; retry deferred at "
          f"{retried_after:.0f} s")  # fmt: skip


def _in_window(run: Run) -> dict[str, Any] | None:
    ti = run.ti()
    if ti["state"] in ("deferred", *ENDED) or ti["try_number"] > 1:
        raise AssertionError(f"try 1 left its window before the kill: {ti}")
    running = ti["state"] == "running" and ti["try_number"] == 1 and ti["hostname"]
    return ti if running and run.watched.live_uids() else None


def _deferred_try(run: Run, try_number: int) -> dict[str, Any] | None:
    ti = run.ti()
    if ti["state"] in ("success", "failed"):
        raise AssertionError(f"ended before try {try_number} deferred: {ti}")
    return ti if (ti["state"], ti["try_number"]) == ("deferred", try_number) else None


def _sigkill_worker(stack: AirflowStack, ti: dict[str, Any], *, runner_too: bool) -> str:
    """SIGKILL the worker that runs (or ran) ``ti``: its process group, or with
    ``runner_too`` every process under it, its task runner too (as its pod lost); then start
    it again, as its Deployment would; its name."""
    worker = _component_of_host(stack, ti["hostname"])
    assert command_of(worker) == "worker", (ti["hostname"], worker)
    if runner_too:
        stack.lose(worker)
    else:
        stack.kill(worker, signal.SIGKILL, grace=10)
    stack.start_again(worker)
    return worker


def _master_pod(api, run: Run) -> dict[str, Any] | None:
    pods = client.CoreV1Api(api).list_namespaced_pod(run.watched.namespace).items
    for pod in pods:
        if pod.metadata.name.endswith("-master-0") and pod.status.phase == "Running":
            statuses = pod.status.container_statuses or []
            return {"uid": pod.metadata.uid, "restarts": sum(s.restart_count for s in statuses)}
    return None


def _job_running(run: Run) -> bool:
    return any(
        (job.get("status") or {}).get("state", {}).get("phase") == "Running"
        for job in run.watched.jobs()
    )


def _served(run: Run, task_id: str) -> tuple[list[str], list[dict[str, Any]]]:
    """Try 1's log as the API server serves it now: its sources (the header Airflow puts
    first), and every line after it."""
    answer = run.stack.api(
        "GET",
        f"{run.ti_path_of(task_id)}/logs/1",
        params={"full_content": "true"},
        headers={"Accept": "application/json"},
    )
    lines = [line for line in answer.get("content", []) if isinstance(line, dict)]
    events = _events(lines)
    start, end = events.index("::group::Log message source details"), events.index("::endgroup::")
    return events[start + 1 : end], lines[end + 1 :]


def _events(lines: list[dict[str, Any]]) -> list[str]:
    return [str(line.get("event", "")) for line in lines]


def _lines_while_deferred(run: Run) -> tuple[dict[str, Any], list[str], list[str]] | None:
    """While the task is deferred to a triggerer: the task instance, the log's sources and the
    trigger's progress and master lines, once both kinds are there."""
    ti = run.ti()
    if ti["state"] != "deferred":
        raise AssertionError(f"the wait left deferred before both kinds of lines were served: {ti}")
    if not ti.get("triggerer_job"):
        return None  # deferred, not yet taken by a triggerer
    sources, lines = _served(run, run.task_id)
    ours = [
        event
        for line, event in zip(lines, _events(lines), strict=True)
        if line.get("logger") == TRIGGER_LOGGER
        and (PROGRESS.match(event) or MASTER_LINE.match(event))
    ]
    if not (any(map(PROGRESS.match, ours)) and any(map(MASTER_LINE.match, ours))):
        return None
    return ti, sources, ours


def _written_by(stack: AirflowStack, command: str, run: Run, task_id: str) -> list[Path]:
    """The log files of ``run``'s ``task_id`` in the folders of every worker or triggerer."""
    return [
        path
        for component in stack.components
        if command_of(component) == command
        for path in _files(stack.task_log_folder(component))
        if f"run_id={run.run_id}" in str(path) and f"task_id={task_id}" in str(path)
    ]


def _component_of_host(stack: AirflowStack, host: str) -> str:
    return next(c for c in stack.components if stack.host_of(c) == host)


def _files(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()] if folder.exists() else []

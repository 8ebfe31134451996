"""A training's progress in the task logs of a deferred operator and of a sensor, through the
real triggerer (issue 43's must-show).

The session's Airflow (``reliability_airflow``: PostgreSQL, two schedulers, two triggerers,
``progress_interval`` 15 s) runs ``tests/reliability/dags/avw_progress_dags.py``: the
operator ``train`` waits on its own job, deferrable; the sensor ``wait`` on the job ``submit``
submitted, deferrable. Both masters train on the local cluster while their W&B runs, on the
stand-in this test starts (the ``wandb_progress`` connection, with a key, defined through the
REST API), report their steps as the progress contract says
(``test_support/training_report.py``), at the pace of a ``REPORTS_FOR`` s training. Each task
first waits ``defer_after`` (15 s) in its worker, where its lines are the task's own, then in
the triggerer, where they are the trigger's: the task log read through the REST API while the
task is deferred must hold at least two lines from the triggerer, their percentage rising, with
an ETA. The training ends once both logs show them (``TRAINS_FOR`` s at most): the runs log
their final summary, as ``run.finish()`` does, then the masters exit and both tasks must
succeed. (Read while deferred: under CeleryExecutor, once a task has ended Airflow serves only
its worker's log, unless remote logging is set; docs/helm.md.) What is simulated: the pods
(KWOK), the trainer and the W&B server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_volcano_wandb.job.ownership import WANDB_RUN_LABEL
from airflow_volcano_wandb.wandb.wandb_run import deterministic_run_id
from test_support import training_report
from test_support.airflow_runs import ENDED, Run, start_run
from test_support.cluster_jobs import SIM_DURATION, end_master, seed_template
from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import API_KEY, ENTITY, PROJECT
from tests.e2e.airflow_stack import AirflowStack, wait_for

# The run takes 1 to 2 min; the session's stack may start with it (up to 15 min when loaded).
pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(1200)]

DAG_ID = "avw_rel_progress"
CONN_ID = "wandb_progress"  # the DAG's
TRIGGER_LOGGER = "airflow_volcano_wandb.triggers.volcano.VolcanoJobTrigger"
#: Each master's run time at most, and the steps its W&B run reports, the last ones
#: ``REPORTS_FOR`` seconds after its job runs. The sensor starts after ``submit`` and waits 15 s
#: in its worker: on a loaded machine its trigger starts a minute or more into the run, and
#: must still see the steps move twice. The test ends the masters once both logs show that
#: (``end_master``), usually well before ``TRAINS_FOR``.
TRAINS_FOR, REPORTS_FOR, TOTAL_STEPS = 120, 110, 2200
FINAL_SUMMARY = {"eval/accuracy": 0.9375}
PROGRESS = re.compile(
    rf"^progress: step (\d+)/{TOTAL_STEPS} \((\d+) %\), epoch \d/3"
    r"(?:, [\d.]+ steps/s(, ETA [\d.]+ (?:s|min))?)?, eval/accuracy=[\d.]+$"
)


@pytest.fixture
def standin(reliability_airflow: AirflowStack) -> Iterator[WandbStandin]:
    """The stand-in, and the DAG's W&B connection to it in Airflow's metadata DB: the task
    processes and the triggerers read it through Airflow, as any connection made in the UI."""
    with WandbStandin(api_key=API_KEY) as server:
        connection = {
            "connection_id": CONN_ID,
            "conn_type": "wandb",
            "host": server.url,
            "password": API_KEY,
        }
        reliability_airflow.api("POST", "/connections", json=connection)
        try:
            yield server
        finally:
            reliability_airflow.api("DELETE", f"/connections/{CONN_ID}")


def test_the_deferred_operator_and_sensor_log_progress_from_the_triggerer_on_the_standin(
    reliability_airflow: AirflowStack, volcano_cluster, admin, standin: WandbStandin
) -> None:
    template = seed_template(
        master={SIM_DURATION: str(TRAINS_FOR)}, worker={SIM_DURATION: str(TRAINS_FOR)}
    )
    run = start_run(
        reliability_airflow, volcano_cluster, admin, DAG_ID, "progress", {"template": template}
    )
    try:
        wandb_runs = {
            task: deterministic_run_id(DAG_ID, task, run.run_id) for task in ("train", "submit")
        }
        for run_id in wandb_runs.values():
            standin.add_run(ENTITY, PROJECT, run_id, summary={}, state="running")
        with training_report.reporting(
            standin,
            [(ENTITY, PROJECT, run_id) for run_id in wandb_runs.values()],
            starts=lambda run_id: _job_running(run, run_id),
            reports_for=REPORTS_FOR,
            total_steps=TOTAL_STEPS,
            final_summary=FINAL_SUMMARY,
        ):
            while_deferred = _logs_while_deferred(run, ("train", "wait"))
        # The runs logged their final summary (leaving the block): now the training ends,
        # unless it did on its own (then the assertions below say what the logs missed).
        if any(run.ti(task_id)["state"] == "deferred" for task_id in ("train", "wait")):
            end_master(admin, run.watched.namespace)
        for task_id in ("train", "wait"):
            run.expect_success(task_id=task_id)
        for task_id in ("train", "wait"):
            _assert_progress_from_the_triggerer(task_id, while_deferred.get(task_id))
    finally:
        run.watched.stop()
        volcano_cluster.delete_namespace(run.watched.namespace)


def _job_running(run: Run, wandb_run_id: str) -> bool:
    """Whether the job that writes to ``wandb_run_id`` runs (its master trains from then)."""
    return any(
        job["metadata"].get("labels", {}).get(WANDB_RUN_LABEL) == wandb_run_id
        and (job.get("status") or {}).get("state", {}).get("phase") == "Running"
        for job in run.watched.jobs()
    )


def _logs_while_deferred(run: Run, task_ids: tuple[str, ...]) -> dict[str, list[dict[str, Any]]]:
    """Each task's log through the REST API, the last read made while it was deferred (the
    task deferred before and after the read): until every log holds two progress lines from
    the triggerer, one with an ETA, or its task ended (then the assertions say what the log
    missed)."""
    logs: dict[str, list[dict[str, Any]]] = {}
    waiting = set(task_ids)

    def all_shown() -> bool:
        for task_id in sorted(waiting):
            state = run.ti(task_id)["state"]
            if state in ENDED:
                waiting.discard(task_id)
            elif state == "deferred":
                log = _task_log(run, task_id)
                if run.ti(task_id)["state"] == "deferred":
                    logs[task_id] = log
                    shown = _progress_from_the_triggerer(log)
                    if len(shown) >= 2 and any(match[3] for match in shown):
                        waiting.discard(task_id)
        return not waiting

    wait_for(all_shown, 900, "both logs to show progress or their tasks to end", interval=3)
    return logs


def _progress_from_the_triggerer(log: list[dict[str, Any]]) -> list[re.Match[str]]:
    """The progress lines the trigger logged in the triggerer, after the task deferred."""
    events = [str(line.get("event", "")) for line in log]
    # A log folder the API server reads itself (LocalExecutor here) serves the worker's lines
    # before the deferral too: the trigger's come after them.
    deferred_at = next(
        (i for i, e in enumerate(events) if e.startswith("Pausing task as DEFERRED")), 0
    )
    return [
        match
        for line, event in zip(log[deferred_at:], events[deferred_at:], strict=True)
        if line.get("logger") == TRIGGER_LOGGER and (match := PROGRESS.match(event))
    ]


def _assert_progress_from_the_triggerer(task_id: str, log: list[dict[str, Any]] | None) -> None:
    """The try's log through the REST API while deferred: the trigger, in the triggerer,
    logged at least two progress lines, rising, one with an ETA."""
    assert log is not None, f"{task_id} was never seen deferred"
    shown = "\n".join(f"{line.get('logger')}: {line.get('event', '')}" for line in log)
    in_triggerer = _progress_from_the_triggerer(log)
    assert len(in_triggerer) >= 2, f"{task_id}: progress lines\n{shown[-6000:]}"
    percents = [int(match[2]) for match in in_triggerer]
    assert percents == sorted(percents) and percents[0] < percents[-1], (task_id, percents)
    assert any(match[3] for match in in_triggerer), f"{task_id}: no ETA\n{shown[-6000:]}"


def _task_log(run: Run, task_id: str) -> list[dict[str, Any]]:
    """Try 1's log as the UI shows it: the worker's lines and the triggerer's, in order."""
    answer = run.stack.api(
        "GET",
        f"{run.ti_path_of(task_id)}/logs/1",
        params={"full_content": "true"},
        headers={"Accept": "application/json"},
    )
    return [line for line in answer.get("content", []) if isinstance(line, dict)]

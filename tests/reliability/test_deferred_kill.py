"""A deferred task killed by a person, or timed out by Airflow: its Volcano job goes at once.

A real Airflow 3 shaped for HA (PostgreSQL, API server, two schedulers, DAG processor, two
triggerers; ``tests/reliability/airflow_runs.ha_stack``) runs the DAGs of
``tests/reliability/dags`` on the shared local cluster. Four runs start
together, each in a namespace of its own, each with a job that would run for 10 minutes:

- marked failed through the REST API while deferred: the triggerer cancels the trigger as a
  user action, ``VolcanoJobTrigger.on_kill`` deletes the job (foreground: pods first);
- cleared while deferred: the same, and the task's next try submits a fresh job and waits
  on it (it must not reattach to the job being deleted);
- the DAG run exceeds ``dagrun_timeout``: the scheduler fails the run and skips the task,
  the trigger is cancelled, the job is deleted;
- the task exceeds ``execution_timeout`` while deferred: the trigger's deadline fires, the
  task resumes, deletes the job and fails with a timeout.

"Gone" means the job and all its pods have left the API server.

And the opposite guarantee: the triggerer itself restarted (gracefully, then by SIGKILL)
while a task waits leaves the job alone; a new triggerer takes the wait over.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import datetime

import pytest

from test_support.airflow_runs import Run, start_run
from test_support.cluster_jobs import SIM_DURATION, seed_template
from tests.e2e.airflow_stack import AirflowStack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(900)]

# Seconds from the kill to no job and no pod: far below the job's own 600 s, so the job went
# by the kill (the trigger first asks Airflow whether the task left deferred, a round trip
# through the triggerer's supervisor that takes seconds on a loaded 2-core machine).
GONE_WITHIN = 60.0


@pytest.fixture(scope="module")
def stack(reliability_airflow) -> AirflowStack:
    return reliability_airflow


@pytest.fixture(scope="module")
def runs(stack, volcano_cluster) -> Iterator[dict[str, Run]]:
    """Start the four runs together (their waits overlap), each in its own namespace."""
    api = volcano_cluster.api_client()
    template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    plan = {
        "mark_failed": "avw_rel_deferred",
        "clear": "avw_rel_deferred",
        "dagrun_timeout": "avw_rel_dagrun_timeout",
        "execution_timeout": "avw_rel_execution_timeout",
    }
    started: dict[str, Run] = {}
    try:
        for case, dag_id in plan.items():
            started[case] = _start_run(stack, volcano_cluster, api, dag_id, case, template)
        yield started
    finally:
        for run in started.values():
            run.watched.stop()
            volcano_cluster.delete_namespace(run.watched.namespace)
        api.close()


def _start_run(stack, volcano_cluster, api, dag_id: str, case: str, template: dict) -> Run:
    """Trigger ``dag_id`` for ``case`` with its job in a namespace of its own, watched."""
    return start_run(stack, volcano_cluster, api, dag_id, f"kill-{case}", {"template": template})


def _wait_gone(run: Run, since: float, what: str) -> float:
    wait_for(lambda: run.watched.emptied_at, 120, f"{what}: job and pods gone", interval=0.3)
    return run.watched.emptied_at - since


def _triggerer_killed(run: Run) -> bool:
    """The trigger's on_kill ran (its line is in the triggerer's or the task's trigger log)."""
    needle = f"Task killed while deferred: deleting Volcano job {run.watched.namespace}/"
    logs = [run.stack.log_dir / "triggerer.log", *run.stack.log_dir.rglob("*.log")]
    return any(needle in path.read_text(errors="replace") for path in logs if path.is_file())


def _iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def test_marked_failed_while_deferred_deletes_the_job(runs):
    run = runs["mark_failed"]
    run.wait_deferred()
    time.sleep(3)  # the trigger is running in the triggerer, watching
    acted = time.time()
    run.stack.api("PATCH", run.ti_path, json={"new_state": "failed"})
    took = _wait_gone(run, acted, "mark failed")
    assert took < GONE_WITHIN, took
    assert run.ti()["state"] == "failed"
    assert _triggerer_killed(run)


def test_cleared_while_deferred_deletes_the_job_and_the_next_try_submits_afresh(runs):
    run = runs["clear"]
    run.wait_deferred()
    first = run.watched.live_uids()
    assert len(first) == 1
    time.sleep(3)
    # No pool slot is free while the clear lands, so the next try waits for the old one's
    # kill. Airflow cancels the old trigger only once the scheduler has scheduled the next try
    # (a cleared task's state is NULL, which its trigger clean-up skips), and two schedulers
    # on PostgreSQL then start that try within seconds: before the old trigger's on_kill, and
    # it adopts the running job (a reattach, which test_lifecycle_airflow.py's
    # clear-while-deferred accepts). Here the kill itself is under test.
    pool = "/pools/default_pool"
    slots = run.stack.api("GET", pool)["slots"]
    run.stack.api("PATCH", pool, params={"update_mask": "slots"}, json={"slots": 0})
    try:
        acted = time.time()
        run.stack.clear(run.dag_id, run.run_id, ["train"])
        # The first try's job is being deleted; the next try may start meanwhile.
        wait_for(lambda: first[0] not in _live(run), 120, "the first job's deletion")
    finally:
        run.stack.api("PATCH", pool, params={"update_mask": "slots"}, json={"slots": slots})
    wait_for(lambda: first[0] not in run.watched.live_uids(), 120, "the first job deleted")
    assert time.time() - acted < GONE_WITHIN + 5
    # The next try submits a new job and waits on it: it did not reattach to the dying one.
    ti = run.wait_deferred()
    assert ti["try_number"] == 2, ti
    second = run.watched.live_uids()
    assert len(second) == 1 and second != first, (first, second)
    time.sleep(5)
    assert run.ti()["state"] == "deferred"
    assert run.watched.live_uids() == second
    # Clean up through the same path.
    acted = time.time()
    run.stack.api("PATCH", run.ti_path, json={"new_state": "failed"})
    assert _wait_gone(run, acted, "mark failed after clear") < GONE_WITHIN


def _live(run: Run) -> list[str]:
    """The uids of the run's jobs that are not being deleted."""
    return [
        j["metadata"]["uid"]
        for j in run.watched.jobs()
        if not j["metadata"].get("deletionTimestamp")
    ]


def test_dag_run_timeout_deletes_the_job(runs):
    run = runs["dagrun_timeout"]
    dag_run = wait_for(
        lambda: (r := run.dag_run())["state"] == "failed" and r, 400, "the DAG run to time out"
    )
    assert run.watched.seen, "the task never submitted its job"
    assert run.ti()["state"] == "skipped"
    took = _wait_gone(run, _iso(dag_run["end_date"]), "dagrun_timeout")
    assert took < GONE_WITHIN, took
    # It was the triggerer (the task was deferred) that deleted the job.
    assert _triggerer_killed(run)


def test_execution_timeout_while_deferred_deletes_the_job(runs):
    run = runs["execution_timeout"]
    ti = wait_for(
        lambda: (t := run.ti())["state"] in ("failed", "success", "up_for_retry") and t,
        300,
        "the task to time out",
    )
    assert ti["state"] == "failed", ti
    assert run.watched.seen, "the task never submitted its job"
    took = _wait_gone(run, _iso(ti["end_date"]), "execution_timeout")
    assert took < GONE_WITHIN, took
    # The trigger's deadline ended the wait (so the task was deferred), then the resumed
    # task deleted the job.
    text = "".join(
        path.read_text(errors="replace")
        for folder in run.stack.task_log_folders()
        for path in (folder / f"dag_id={run.dag_id}").rglob("*.log*")
    )
    assert "execution_timeout reached" in text and "Deleted Volcano job" in text
    assert "JobTimeoutError" in text  # the class a retry policy matches


@pytest.mark.long  # 4 minutes under CI load: make test-long, not CI
def test_a_restarted_triggerer_takes_the_wait_over_and_leaves_the_job_alone(stack, volcano_cluster):
    """Not a kill of the task: the triggerer itself stops while the task waits.

    First gracefully (SIGTERM, as in a deploy: the triggerer cancels its triggers on the way
    out), then by a crash (SIGKILL: the new triggerer takes the trigger over once the dead
    one misses its heartbeats). The stack runs two triggerers: the one running the trigger
    is restarted, and the other or the restarted one takes it. Neither may touch the job;
    each time a new triggerer resumes the wait, and the task succeeds when the job
    completes: one job, one try.
    """
    api = volcano_cluster.api_client()
    template = seed_template(master={SIM_DURATION: "200"}, worker={SIM_DURATION: "200"})
    run = _start_run(stack, volcano_cluster, api, "avw_rel_deferred", "triggerer_restart", template)
    try:
        run.wait_deferred()
        [uid] = run.watched.live_uids()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            before = wait_for(
                lambda: (run.ti()["trigger"] or {}).get("triggerer_id"), 60, "a triggerer"
            )
            stack.restart(stack.component_of_job(before), sig)  # the one running it
            wait_for(
                lambda b=before: (run.ti()["trigger"] or {}).get("triggerer_id") not in (None, b),
                180,
                f"a new triggerer to take the trigger over after {sig.name}",
            )
            assert run.ti()["state"] == "deferred"
            assert run.watched.live_uids() == [uid]  # the job was left alone
        ti = wait_for(
            lambda: (t := run.ti())["state"] in ("success", "failed", "up_for_retry") and t,
            400,
            "the task to end",
        )
        assert ti["state"] == "success", ti
        assert ti["try_number"] == 1, ti
        assert run.watched.seen == {uid}  # one job, never resubmitted
        assert not _triggerer_killed(run)
    finally:
        run.watched.stop()
        volcano_cluster.delete_namespace(run.watched.namespace)
        api.close()

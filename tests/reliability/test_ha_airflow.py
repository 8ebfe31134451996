"""Production-shaped Airflow: a handover, a crash or a database restart never kills training.

The session's reliability stack (``reliability_airflow``; ``test_support/airflow_runs.py``)
is shaped like an HA deployment: PostgreSQL, two schedulers, the DAG processor, two Celery
workers (Redis the broker; ``EXECUTOR=local``: LocalExecutor, the schedulers run the tasks) and
two triggerers, A (``triggerer``, capacity ``HANDOVER_JOBS / 2``) and B (``triggerer-2``),
with ``triggerer_health_check_threshold`` at 15 s.

Every job here runs until the test ends it: cutting its master pod's simulated duration to
1 s makes KWOK end the pod at once, so each step happens while the jobs are known to run, or
known to have ended. Half the jobs succeed, half fail (the master exits 3): each task must end
with its own job's outcome, on its first try. The runs use ``avw_rel_keep``
(``on_finish_action="keep"``): a finished job stays, so any deletion shows.

1. Handover (``AVW_HANDOVER_JOBS`` jobs: 4 in ``make test``, 20 in ``make test-ha``): half
   deferred on A (B paused meanwhile), half on B (A is full); A frozen (SIGSTOP of its process
   group) past the threshold, so B takes A's triggers over; some of A's jobs end while A is
   still frozen (B sees them end and their tasks resume); A thawed (SIGCONT), when Airflow 3.3
   cancels A's stale triggers "by user action" and calls their ``on_kill``. Then 0 jobs are
   deleted, every task ends with its job's outcome, and each trigger runs on exactly one
   triggerer. The figures go to ``test-artifacts/reliability/handover.json`` (read by
   ``bench/run_all.py --only handover``).
2. Faults while deferred: a triggerer SIGKILLed, a scheduler SIGKILLed, PostgreSQL restarted
   (a component that exits for want of its database is started again, as its supervisor would
   in production: ``AirflowStack.supervised``). 0 jobs deleted, 0 duplicates, every verdict
   right.

The third trial, a user's mark-failed and clear of a deferred task still deleting its job on
this stack, is ``tests/reliability/test_deferred_kill.py`` (same session stack); the fourth,
one watch per triggerer per namespace and requests per job flat with the number of waiting
jobs, is ``tests/reliability/test_ha_watch_load.py``.
"""

from __future__ import annotations

import json
import signal
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from test_support.airflow_runs import (
    ARTIFACTS,
    ENDED,
    HANDOVER_JOBS,
    TRIGGERER_HEALTH_CHECK_THRESHOLD,
    Run,
    start_run,
)
from test_support.cluster_jobs import SIM_DURATION, end_master, failing_template, seed_template
from tests.e2e.airflow_stack import AirflowStack, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(1500)]

DAG_ID = "avw_rel_keep"
A, B = "triggerer", "triggerer-2"
FIGURES = ARTIFACTS / "handover.json"
FOREVER = "3600"  # seconds: every job runs until the test ends it


@dataclass
class Trial:
    """One DAG run and the outcome its job will have when the test ends it."""

    run: Run
    fails: bool

    @property
    def expected(self) -> str:
        return "failed" if self.fails else "success"

    def triggerer_id(self) -> int | None:
        return (self.run.ti().get("trigger") or {}).get("triggerer_id")

    def end_job(self, api) -> None:
        """End the job now, with the outcome it was made for."""
        end_master(api, self.run.watched.namespace)

    def wait_ended(self) -> dict:
        return self.run.wait_ended(timeout=300)


@dataclass
class Verdicts:
    """What the trials count: every figure but the times must be 0 (or N)."""

    jobs: int
    jobs_deleted: int
    duplicates: int
    wrong_verdicts: list[str]


def _template(fails: bool) -> dict:
    if fails:
        return failing_template(FOREVER)
    return seed_template(master={SIM_DURATION: FOREVER}, worker={SIM_DURATION: FOREVER})


def _start(stack, volcano_cluster, api, case: str, fails: bool) -> Trial:
    run = start_run(stack, volcano_cluster, api, DAG_ID, case, {"template": _template(fails)})
    return Trial(run, fails)


def _wait_assigned(trials: list[Trial], what: str, timeout: float = 600) -> dict[str, int]:
    """Each trial's task deferred, with its trigger assigned to a triggerer (run -> job id)."""
    for trial in trials:
        trial.run.wait_deferred(timeout=timeout)

    def assigned():
        ids = {t.run.run_id: t.triggerer_id() for t in trials}
        return ids if all(ids.values()) else None

    return wait_for(assigned, timeout, what, interval=1)


def _verdicts(trials: list[Trial]) -> Verdicts:
    """After every task ended: deletions, duplicates and wrong outcomes."""
    deleted = duplicates = 0
    wrong = []
    for trial in trials:
        ti = trial.run.ti()
        if (ti["state"], ti["try_number"]) != (trial.expected, 1):
            wrong.append(f"{trial.run.run_id}: {ti['state']} on try {ti['try_number']}")
        jobs = trial.run.watched.jobs()
        live = {j["metadata"]["uid"] for j in jobs if not j["metadata"].get("deletionTimestamp")}
        deleted += len(trial.run.watched.seen - live)
        duplicates += max(0, len(trial.run.watched.seen) - 1)
    return Verdicts(len(trials), deleted, duplicates, wrong)


def _cleanup(trials: list[Trial], volcano_cluster) -> None:
    for trial in trials:
        trial.run.watched.stop()
        volcano_cluster.delete_namespace(trial.run.watched.namespace)


def _trigger_logs(stack: AirflowStack, run: Run) -> dict[int, str]:
    """The run's trigger logs by triggerer job id: each triggerer writes its own
    (``attempt=N.log.trigger.<job id>.log``)."""
    where = Path(f"dag_id={run.dag_id}") / f"run_id={run.run_id}"
    return {
        int(path.name.rsplit(".", 2)[-2]): path.read_text(errors="replace")
        for folder in stack.task_log_folders()  # one, or each triggerer's own under Celery
        for path in (folder / where).rglob("*.log.trigger.*.log")
    }


def _running_on(stack: AirflowStack, run: Run) -> set[int]:
    """The triggerers (job ids) running this run's trigger: started (``trigger ... starting``),
    neither cancelled nor completed."""
    return {
        triggerer
        for triggerer, text in _trigger_logs(stack, run).items()
        if ") starting" in text
        and "Trigger cancelled" not in text
        and "trigger completed" not in text
    }


def _spread(
    stack: AirflowStack, cluster, api, case: str, count: int, trials: list[Trial]
) -> tuple[int, int]:
    """Start ``count`` trials named ``case-<i>`` (appended to ``trials``; the odd ones fail),
    the first half's triggers on A and the rest on B; return the job ids of A and B.

    B is paused (SIGSTOP) while the first half defers, so A takes them; A's capacity is
    ``HANDOVER_JOBS / 2``, so once B runs again it takes the rest.
    """
    half = count // 2

    def start(i: int) -> Trial:
        return _start(stack, cluster, api, f"{case}-{i}", i % 2 == 1)

    stack.send_signal(B, signal.SIGSTOP)
    try:
        trials += [start(i) for i in range(half)]
        a_ids = _wait_assigned(trials[-half:], "the first half deferred and on A")
    finally:
        stack.send_signal(B, signal.SIGCONT)
    trials += [start(i) for i in range(half, count)]
    b_ids = _wait_assigned(trials[-(count - half) :], "the second half deferred and on B")
    [a_id], [b_id] = set(a_ids.values()), set(b_ids.values())
    assert (stack.component_of_job(a_id), stack.component_of_job(b_id)) == (A, B)
    return a_id, b_id


def test_a_frozen_triggerer_hands_its_jobs_over_and_none_is_deleted(
    reliability_airflow, volcano_cluster, admin
):
    stack = reliability_airflow
    half = HANDOVER_JOBS // 2
    ended_while_frozen = max(1, half // 2)
    trials: list[Trial] = []
    try:
        a_id, b_id = _spread(stack, volcano_cluster, admin, "handover", HANDOVER_JOBS, trials)
        on_a = trials[:half]
        uids = {t.run.run_id: t.run.watched.live_uids() for t in trials}

        frozen_at = time.monotonic()
        stack.send_signal(A, signal.SIGSTOP)
        try:
            wait_for(
                lambda: all(t.triggerer_id() == b_id for t in on_a),
                TRIGGERER_HEALTH_CHECK_THRESHOLD * 4 + 60,
                "B to take A's triggers over",
            )
            takeover_s = time.monotonic() - frozen_at
            # Some of A's jobs end while A is still frozen: B's triggers see them end.
            for trial in on_a[:ended_while_frozen]:
                trial.end_job(admin)
            for trial in on_a[:ended_while_frozen]:
                trial.wait_ended()
        finally:
            frozen_s = time.monotonic() - frozen_at
            stack.send_signal(A, signal.SIGCONT)

        # Thawed, A cancels the triggers it lost "by user action" and calls their on_kill,
        # which finds each task still deferred and leaves its job: from then on, B alone
        # watches every job still running.
        still_deferred = trials[ended_while_frozen:]
        wait_for(
            lambda: all(
                "Trigger cancelled" in _trigger_logs(stack, t.run).get(a_id, "")
                for t in on_a[ended_while_frozen:]
            ),
            120,
            "A to cancel the triggers B took over",
        )
        live = {t.run.run_id: t.run.watched.live_uids() for t in trials}
        assert live == uids, "a job was deleted by the handover"
        watched_by = {t.run.run_id: _running_on(stack, t.run) for t in still_deferred}
        assert watched_by == {t.run.run_id: {b_id} for t in still_deferred}
        # The other jobs end at once, while A's on_kill may still be asking for the state:
        # it may then read the task's state only after B saw the job end and the task resumed.
        for trial in still_deferred:
            trial.end_job(admin)
        for trial in still_deferred:
            trial.wait_ended()
        assert {t.run.run_id: t.run.watched.live_uids() for t in trials} == uids
        verdicts = _verdicts(trials)
        figures = {
            "jobs": HANDOVER_JOBS,
            "triggerers": 2,
            "frozen_s": round(frozen_s, 1),
            "jobs_deleted": verdicts.jobs_deleted,
            "wrong_verdicts": len(verdicts.wrong_verdicts),
            "reassigned": len(on_a),
            "takeover_s": round(takeover_s, 1),
            "ended_while_frozen": ended_while_frozen,
            "duplicates": verdicts.duplicates,
        }
        FIGURES.parent.mkdir(parents=True, exist_ok=True)
        FIGURES.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"handover: {figures}")
        assert verdicts == Verdicts(HANDOVER_JOBS, 0, 0, []), asdict(verdicts)
        assert not _deletions_logged(stack, trials)
    finally:
        _cleanup(trials, volcano_cluster)


def _deletions_logged(stack: AirflowStack, trials: list[Trial]) -> list[str]:
    """Lines where a trigger deleted one of these jobs for a kill (none may, here)."""
    needle = "Task killed while deferred: deleting Volcano job"
    namespaces = tuple(f"{t.run.watched.namespace}/" for t in trials)
    return [
        line
        for path in stack.log_dir.rglob("*.log")
        for line in path.read_text(errors="replace").splitlines()
        if needle in line and any(ns in line for ns in namespaces)
    ]


@pytest.mark.long  # 2.5 minutes under CI load: make test-long, not CI
def test_a_killed_triggerer_a_killed_scheduler_and_a_database_restart_keep_every_job(
    reliability_airflow, volcano_cluster, admin
):
    stack = reliability_airflow
    trials: list[Trial] = []
    try:
        a_id, _ = _spread(stack, volcano_cluster, admin, "faults", 4, trials)
        uids = {t.run.run_id: t.run.watched.live_uids() for t in trials}
        jobs = iter(trials)

        # A triggerer with jobs in flight dies: B takes them once A's heartbeat lapses.
        stack.kill(A, signal.SIGKILL)
        try:
            wait_for(
                lambda: all(t.triggerer_id() not in (None, a_id) for t in trials),
                TRIGGERER_HEALTH_CHECK_THRESHOLD * 4 + 60,
                "B to take every trigger",
            )
            _end_one(next(jobs), admin)
        finally:
            stack.start_again(A)

        # A scheduler dies: the other one resumes the task when its job ends.
        stack.kill("scheduler", signal.SIGKILL)
        try:
            _end_one(next(jobs), admin)
        finally:
            stack.start_again("scheduler")

        # PostgreSQL restarts under every component. A scheduler that hits the database
        # while it is down exits; its supervisor starts it again, as in production.
        with stack.supervised() as restarts:
            stack.postgres.restart()
            for trial in jobs:
                _end_one(trial, admin)
            stack.check_alive()
        print(f"started again after the database restart: {restarts or 'none'}")
        stack.check_alive()

        assert {t.run.run_id: t.run.watched.live_uids() for t in trials} == uids
        verdicts = _verdicts(trials)
        print(f"faults: {verdicts}")
        assert verdicts == Verdicts(len(trials), 0, 0, []), asdict(verdicts)
        assert not _deletions_logged(stack, trials)
    finally:
        _cleanup(trials, volcano_cluster)


def _end_one(trial: Trial, api) -> None:
    trial.end_job(api)
    ti = trial.wait_ended()
    assert ti["state"] in ENDED, ti

"""The stall timeout (pure): which master is probed, when, what an empty log means, and how
the verdict is confirmed, raised and cleaned up.

The pods are shaped as the API returns them (the master's first container ``running`` since
``startedAt``), and the log probe's answer as ``GET pods/<pod>/log?sinceSeconds&limitBytes=1``
gives it (``""``: nothing printed since); both are checked against the local cluster in
tests/integration/test_stall_on_cluster.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import pickle
from datetime import datetime, timezone
from pathlib import Path

import pytest

from airflow_volcano_wandb import exceptions
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wait import cleanup, failure_exception, step_io, wandb_progress
from airflow_volcano_wandb.wait.judge import JobTarget, WandbRunRef, judge_stall, see
from airflow_volcano_wandb.wait.outcome import WaitResult
from airflow_volcano_wandb.wait.stall import (
    Stall,
    WandbStep,
    probe_due,
    silence_probe,
    stalled,
    stalled_online,
)
from airflow_volcano_wandb.wait.step import StepMemory, look, probes_stall
from test_support.airflow_compat import dag_bag
from test_support.waits import operator_trigger, sensor_trigger
from tests.unit.wait.test_wait_verdicts import T0, job

REPO = Path(__file__).resolve().parents[3]
TIMEOUT = 600.0
TARGET = JobTarget(job_name="j", namespace="ns", job_uid="u-1", stall_timeout=TIMEOUT)
RUNNING = job("Running", running={"master": 1, "worker": 2})


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    rank: str,
    *,
    running_for: float | None = TIMEOUT,
    uid: str = "u-1",
    deleting: bool = False,
    phase: str = "Running",
) -> dict:
    """A pod of job ``j`` whose first container (``pytorch``) has run ``running_for`` seconds
    at ``T0`` (``None``: it waits to start); a ``sidecar`` has run for ever."""
    state = {"waiting": {"reason": "ContainerCreating"}}
    if running_for is not None:
        state = {"running": {"startedAt": _stamp(T0 - running_for)}}
    sidecar = {"name": "sidecar", "state": {"running": {"startedAt": _stamp(0)}}}
    metadata = {
        "name": f"j-{rank}",
        "labels": {"volcano.sh/task-spec": rank.split("-")[0]},
        "ownerReferences": [{"kind": "Job", "uid": uid}],
    }
    if deleting:
        metadata["deletionTimestamp"] = _stamp(T0)
    return {
        "metadata": metadata,
        "spec": {"containers": [{"name": "pytorch"}, {"name": "sidecar"}]},
        "status": {
            "phase": phase,
            "containerStatuses": [sidecar, {"name": "pytorch", "state": state}],
        },
    }


PODS = [pod("worker-0"), pod("master-0"), pod("worker-1")]


def test_the_master_running_for_the_timeout_is_probed_by_its_first_container():
    probe = silence_probe(RUNNING, PODS, TIMEOUT, T0, "u-1")
    assert probe == Stall("j-master-0", "master-0", "pytorch", TIMEOUT, TIMEOUT)
    assert (probe.task, probe.since_seconds) == ("master", 600)
    assert Stall("p", "master-0", "c", 2.5, 9).since_seconds == 3  # never shorter
    assert Stall("p", "master-0", "c", 0.2, 9).since_seconds == 1


@pytest.mark.parametrize(
    "master",
    [
        pod("master-0", running_for=TIMEOUT - 1),  # (re)started lately: not silent for long
        pod("master-0", running_for=None),  # not started
        pod("master-0", uid="u-old"),  # an earlier job of the same name
        pod("master-0", deleting=True),  # torn down by a Volcano restart
        pod("master-0", phase="Succeeded"),  # ended
    ],
)
def test_no_master_running_for_the_timeout_is_nothing_to_probe(master):
    assert silence_probe(RUNNING, [pod("worker-0"), master], TIMEOUT, T0, "u-1") is None


def test_only_an_empty_log_since_the_timeout_is_a_stall():
    probe = silence_probe(RUNNING, PODS, TIMEOUT, T0, "u-1")
    assert stalled(probe, "") == probe
    assert stalled(probe, "s") is None
    assert stalled(probe, "\n") is None  # an empty line is a line


def test_the_master_is_probed_at_most_every_quarter_of_the_timeout():
    assert not probe_due(None, None, T0)  # off
    assert probe_due(TIMEOUT, None, T0)  # never probed, or forgotten: at once
    assert not probe_due(TIMEOUT, T0, T0 + TIMEOUT / 4 - 1)
    assert probe_due(TIMEOUT, T0, T0 + TIMEOUT / 4)


def test_a_look_asks_for_a_probe_only_of_a_running_job_and_remembers_when():
    first = look(RUNNING, TARGET, StepMemory(), T0)
    assert first.probe_stall and first.read_pods and first.memory.stall_probed_at == T0
    soon = look(RUNNING, TARGET, first.memory, T0 + 10)
    assert not soon.probe_stall and not soon.read_pods  # no budget: no pods needed either
    assert soon.memory.stall_probed_at == T0
    due = look(RUNNING, TARGET, soon.memory, T0 + TIMEOUT / 4)
    assert due.probe_stall and due.memory.stall_probed_at == T0 + TIMEOUT / 4
    for other in (job("Pending"), job("Completing"), None):
        assert not probes_stall(see(other, TARGET), TARGET, None, T0)
    off = JobTarget(job_name="j", namespace="ns", job_uid="u-1")
    assert not look(RUNNING, off, StepMemory(), T0).probe_stall


def test_the_verdict_names_the_master_the_timeout_and_how_long_it_ran():
    probe = Stall("j-master-0", "master-0", "pytorch", TIMEOUT, 900.0)
    result = judge_stall(see(RUNNING, TARGET), probe)
    assert (result.outcome, result.job_uid, result.phase, result.stall) == (
        Ending.STALLED,
        "u-1",
        "Running",
        probe,
    )
    assert "has stalled" in result.message and "rank master-0" in result.message
    assert "stall_timeout=600" in result.message and "run for 900s" in result.message
    assert judge_stall(see(job("Completed"), TARGET), probe) is None
    event = json.loads(json.dumps(result.to_event()))
    assert WaitResult.from_event(event) == result
    error = failure_exception.for_failure(result, "m")
    assert type(error) is exceptions.TrainingStalledError
    assert isinstance(error, exceptions.ContainerError)
    assert (error.pod, error.task, error.container) == ("j-master-0", "master", "pytorch")
    assert (error.stall_timeout, error.running_for) == (TIMEOUT, 900.0)
    assert error.job == {"name": "j", "namespace": "ns", "uid": "u-1"}
    assert str(pickle.loads(pickle.dumps(error))) == "m"


def test_a_wandb_step_logged_within_the_timeout_is_progress_and_an_older_one_is_not():
    probe = Stall("j-master-0", "master-0", "pytorch", TIMEOUT, 900.0)
    assert stalled_online(probe, WandbStep(1200, T0 - TIMEOUT + 1), T0) is None
    old = stalled_online(probe, WandbStep(1200, T0 - TIMEOUT), T0)
    assert old == Stall("j-master-0", "master-0", "pytorch", TIMEOUT, 900.0, 1200, T0 - TIMEOUT)
    assert stalled_online(probe, None, T0) == probe  # W&B could not say: the log alone


def test_the_runs_last_step_is_its_summarys_step_and_timestamp():
    assert WandbStep.of_summary({"_step": 7, "_timestamp": T0, "loss": 0.1}) == WandbStep(7, T0)
    assert WandbStep.of_summary({"_timestamp": T0}) == WandbStep(None, T0)
    for nothing_logged in ({}, {"_step": 7}, {"_timestamp": "soon"}, {"_timestamp": True}):
        assert WandbStep.of_summary(nothing_logged) is None


def test_a_verdict_with_the_wandb_run_names_its_last_step_and_when():
    stall = Stall("j-master-0", "master-0", "pytorch", TIMEOUT, 900.0, 1200, T0 - TIMEOUT)
    result = judge_stall(see(RUNNING, TARGET), stall)
    logged = _stamp(T0 - TIMEOUT)
    assert f"W&B run's last step, 1200, was logged at {logged}" in result.message
    assert WaitResult.from_event(json.loads(json.dumps(result.to_event()))) == result
    error = failure_exception.for_failure(result, result.message)
    assert (error.wandb_step, error.wandb_logged_at) == (1200, T0 - TIMEOUT)
    assert "was logged at" in str(error)
    old_event = {k: v for k, v in stall.to_dict().items() if not k.startswith("wandb_")}
    assert Stall.from_dict(old_event).wandb_logged_at is None  # an event of an older release
    by_log = judge_stall(see(RUNNING, TARGET), Stall("p", "master-0", "c", TIMEOUT, 900.0))
    assert "W&B" not in by_log.message
    log_only = failure_exception.for_failure(by_log, by_log.message)
    assert log_only.wandb_step is None and log_only.wandb_logged_at is None


@pytest.mark.parametrize("action", ["keep", "delete_succeeded", "delete"])
def test_a_stalled_job_is_always_deleted(action):
    assert cleanup.deletes_job(Ending.STALLED, action)


class Calls:
    """``step_io.JobCalls`` over canned answers: the job (GET), its pods (LIST), and the
    master's log since the timeout, one answer per probe."""

    def __init__(self, job: dict | None, logs: list[str | Exception]) -> None:
        self.job, self.logs, self.probes = job, list(logs), []

    async def fetch(self, name: str) -> dict | None:
        return self.job

    async def list_pods(self, job_name: str) -> list[dict]:
        return PODS

    async def annotate(self, job, annotations) -> bool:
        return True

    async def log_since(self, pod: str, container: str, since_seconds: int) -> str:
        self.probes.append((pod, container, since_seconds))
        answer = self.logs.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def _step(calls: Calls, monkeypatch, wandb=None, log=None) -> WaitResult | None:
    monkeypatch.setattr(step_io.time, "time", lambda: T0)
    log = log or logging.getLogger("test")
    memory, result = asyncio.run(
        step_io.take_step(
            calls, RUNNING, TARGET, StepMemory(), log, fresh=False, pod_watch=None, wandb=wandb
        )
    )
    assert memory.stall_probed_at == T0
    return result


def test_a_silent_master_ends_the_wait_only_when_a_fresh_read_and_a_second_probe_agree(
    monkeypatch,
):
    calls = Calls(RUNNING, ["", ""])
    result = _step(calls, monkeypatch)
    assert result.outcome is Ending.STALLED and result.stall.pod == "j-master-0"
    assert calls.probes == [("j-master-0", "pytorch", 600)] * 2


@pytest.mark.parametrize(
    ("fresh", "logs"),
    [
        (RUNNING, ["step 1200 loss 0.3\n"]),  # it printed: no second look
        (RUNNING, ["", "s"]),  # it printed meanwhile
        (job("Completed"), [""]),  # it ended meanwhile
        (None, [""]),  # it is gone
        (RUNNING, [RuntimeError("503")]),  # the log cannot be read: no guess
        (RUNNING, ["", RuntimeError("503")]),
    ],
)
def test_anything_but_a_confirmed_silence_waits_on(fresh, logs, monkeypatch):
    assert _step(Calls(fresh, logs), monkeypatch) is None


class Wandb:
    """``wandb_progress.WandbProgress`` over canned last steps, one per question."""

    run = WandbRunRef("wandb_default", "r1", "ml-team", "retraining")

    def __init__(self, steps: list[WandbStep | None]) -> None:
        self.steps = list(steps)

    async def last_step(self, log) -> WandbStep | None:
        return self.steps.pop(0)

    async def progress(self, log) -> None:
        return None

    async def stopped(self, log) -> bool:
        return False


class Log:
    """The lines a step logs, by level."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []

    def info(self, message: str, *args) -> None:
        self.lines.append(("info", message % args))

    def warning(self, message: str, *args) -> None:
        self.lines.append(("warning", message % args))


def test_a_silent_master_whose_wandb_run_logged_a_step_lately_is_not_stalled(monkeypatch):
    log = Log()
    wandb = Wandb([WandbStep(1200, T0 - 5)])
    assert _step(Calls(RUNNING, [""]), monkeypatch, wandb, log) is None
    assert wandb.steps == []  # asked once: no verdict to confirm
    (said,) = [line for level, line in log.lines if level == "info" and "W&B" in line]
    assert "W&B run r1 logged step 1200 5s ago" in said and "not stalled" in said


def test_a_silent_master_whose_wandb_run_is_quiet_too_is_stalled_naming_its_step(monkeypatch):
    quiet = WandbStep(1200, T0 - TIMEOUT - 60)
    result = _step(Calls(RUNNING, ["", ""]), monkeypatch, Wandb([quiet, quiet]))
    assert result.outcome is Ending.STALLED
    assert (result.stall.wandb_step, result.stall.wandb_logged_at) == (1200, quiet.logged_at)
    assert "last step, 1200, was logged at" in result.message


def test_a_wandb_run_that_advanced_by_the_confirmation_saves_the_job(monkeypatch):
    quiet, logged = WandbStep(1200, T0 - TIMEOUT - 60), WandbStep(1201, T0 - 1)
    assert _step(Calls(RUNNING, ["", ""]), monkeypatch, Wandb([quiet, logged])) is None


def test_when_wandb_cannot_say_the_log_alone_judges(monkeypatch):
    result = _step(Calls(RUNNING, ["", ""]), monkeypatch, Wandb([None, None]))
    assert result.outcome is Ending.STALLED and result.stall.wandb_logged_at is None


def test_a_wandb_read_that_fails_is_said_once_and_leaves_the_log_to_judge(monkeypatch):
    def unreachable(run: WandbRunRef, method: str) -> dict:
        raise ConnectionError("W&B is unreachable")

    monkeypatch.setattr(wandb_progress, "_read", unreachable)
    progress, log = wandb_progress.WandbProgress(Wandb.run), Log()
    assert asyncio.run(progress.last_step(log)) is None
    assert asyncio.run(progress.last_step(log)) is None
    (said,) = log.lines
    assert "ConnectionError: W&B is unreachable" in said[1] and "log alone" in said[1]
    monkeypatch.setattr(wandb_progress, "_read", lambda run, method: {"_step": 3})
    assert asyncio.run(progress.last_step(log)) is None  # no _timestamp: nothing logged yet
    summary = {"_step": 3, "_timestamp": T0}
    monkeypatch.setattr(wandb_progress, "_read", lambda run, method: summary)
    assert asyncio.run(progress.last_step(log)) == WandbStep(3, T0)
    assert len(log.lines) == 1


def test_a_connection_without_a_key_is_not_asked(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_WANDB_NOKEY", json.dumps({"conn_type": "wandb"}))
    with pytest.raises(LookupError, match="no API key"):
        wandb_progress._read(WandbRunRef("wandb_nokey", "r1", None, "p"), "get_run_summary")


def test_the_operator_and_the_sensor_hand_the_timeout_to_the_serialized_trigger():
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", stall_timeout=1800)
    assert operator_trigger(op).serialize()[1]["stall_timeout"] == 1800
    assert operator_trigger(op).spec.target().stall_timeout == 1800
    sensor = VolcanoJobSensor(
        task_id="w", job_name="j", namespace="ns", stall_timeout=60.5, wandb_conn_id=None
    )
    target = sensor._target()
    assert target.stall_timeout == 60.5
    assert sensor_trigger(sensor).serialize()[1]["stall_timeout"] == 60.5
    off = VolcanoPyTorchJobOperator(task_id="t", template="s.yaml")
    assert off.stall_timeout is None
    assert operator_trigger(off, deferred=False).serialize()[1]["stall_timeout"] is None


def test_a_trigger_serialised_before_the_timeout_existed_never_probes():
    assert VolcanoJobTrigger(job_name="j", namespace="ns").spec.target().stall_timeout is None


@pytest.mark.parametrize(
    ("value", "error"), [(0, ValueError), (-5.0, ValueError), (True, TypeError), ("60", TypeError)]
)
def test_a_timeout_that_is_not_positive_seconds_is_refused(value, error):
    with pytest.raises(error, match="stall_timeout"):
        VolcanoPyTorchJobOperator(task_id="t", template="s.yaml", stall_timeout=value)


def test_the_example_retraining_dag_bounds_a_stall_and_the_other_waits_do_not():
    waits = {
        (dag.dag_id, task.task_id): task.stall_timeout
        for dag in dag_bag(str(REPO / "dags")).dags.values()
        for task in dag.tasks
        if isinstance(task, VolcanoJobSensor | VolcanoPyTorchJobOperator)
    }
    stalls = {key: value for key, value in waits.items() if value is not None}
    assert stalls == {("volcano_pytorch_retraining", "train"): 1800}, waits

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
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wait import cleanup, failure_exception, step_io
from airflow_volcano_wandb.wait.judge import WaitTarget, judge_stall, probes_stall, see
from airflow_volcano_wandb.wait.outcome import Outcome, WaitResult
from airflow_volcano_wandb.wait.stall import Stall, probe_due, silence_probe, stalled
from airflow_volcano_wandb.wait.step import WaitMemory, look
from tests.airflow_compat import dag_bag
from tests.unit.test_wait_verdicts import T0, job

REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 600.0
TARGET = WaitTarget(name="j", namespace="ns", uid="u-1", stall_timeout=TIMEOUT)
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
    first = look(RUNNING, TARGET, WaitMemory(), T0)
    assert first.probe_stall and first.read_pods and first.memory.stall_probed_at == T0
    soon = look(RUNNING, TARGET, first.memory, T0 + 10)
    assert not soon.probe_stall and not soon.read_pods  # no budget: no pods needed either
    assert soon.memory.stall_probed_at == T0
    due = look(RUNNING, TARGET, soon.memory, T0 + TIMEOUT / 4)
    assert due.probe_stall and due.memory.stall_probed_at == T0 + TIMEOUT / 4
    for other in (job("Pending"), job("Completing"), None):
        assert not probes_stall(see(other, TARGET), TARGET, None, T0)
    off = WaitTarget(name="j", namespace="ns", uid="u-1")
    assert not look(RUNNING, off, WaitMemory(), T0).probe_stall


def test_the_verdict_names_the_master_the_timeout_and_how_long_it_ran():
    probe = Stall("j-master-0", "master-0", "pytorch", TIMEOUT, 900.0)
    result = judge_stall(see(RUNNING, TARGET), probe)
    assert (result.outcome, result.uid, result.phase, result.stall) == (
        Outcome.STALLED,
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


@pytest.mark.parametrize("action", ["keep", "delete_succeeded", "delete"])
def test_a_stalled_job_is_always_deleted(action):
    assert cleanup.deletes_job(Outcome.STALLED, action)


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


def _step(calls: Calls, monkeypatch) -> WaitResult | None:
    monkeypatch.setattr(step_io.time, "time", lambda: T0)
    log = logging.getLogger("test")
    memory, result = asyncio.run(
        step_io.take_step(calls, RUNNING, TARGET, WaitMemory(), log, fresh=False)
    )
    assert memory.stall_probed_at == T0
    return result


def test_a_silent_master_ends_the_wait_only_when_a_fresh_read_and_a_second_probe_agree(
    monkeypatch,
):
    calls = Calls(RUNNING, ["", ""])
    result = _step(calls, monkeypatch)
    assert result.outcome is Outcome.STALLED and result.stall.pod == "j-master-0"
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


def test_the_operator_and_the_sensor_hand_the_timeout_to_the_serialized_trigger():
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", stall_timeout=1800)
    op._job = {"name": "j", "namespace": "ns", "uid": "u"}
    assert op._trigger(masked=[], deferred=True).serialize()[1]["stall_timeout"] == 1800
    assert op._trigger(masked=[], deferred=True).spec.target().stall_timeout == 1800
    sensor = VolcanoJobSensor(task_id="w", job_name="j", namespace="ns", stall_timeout=60.5)
    target = sensor._target()
    assert target.stall_timeout == 60.5
    assert sensor._trigger(target).serialize()[1]["stall_timeout"] == 60.5
    off = VolcanoPyTorchJobOperator(task_id="t", template="s.yaml")
    off._job = op._job
    assert off.stall_timeout is None
    assert off._trigger(masked=[], deferred=False).serialize()[1]["stall_timeout"] is None


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

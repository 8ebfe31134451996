"""The resume record's edges in the operator (``parts/resumption.py``): a store or a read that
fails resumes nothing and fails no task; a sync wait cut by ``execution_timeout`` is recorded
as a timeout, not left to be taken for a kill. (The record's path on the cluster is
``tests/integration/test_resume_on_cluster.py``.)"""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.airflow_compat import AirflowException, AirflowTaskTimeout
from airflow_volcano_wandb.job.resume import RunRecord
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.operator_parts import OperatorParts
from airflow_volcano_wandb.parts.training_run import pulled_run
from test_support.operator_tries import StubTaskInstance

REF = {"name": "wandb-job-run1", "namespace": "ns", "uid": "uid-1"}


class Store:
    def __init__(self, values: dict[str, Any] | None = None, fail: bool = False) -> None:
        self.values, self.fail = dict(values or {}), fail

    def get(self, key: str, default: Any = None) -> Any:
        if self.fail:
            raise OSError("the metadata DB is away")
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        if self.fail:
            raise OSError("the metadata DB is away")
        self.values[key] = value


class UnreadableApi:
    """A hook whose read fails: no proof that the job is gone."""

    def get_job(self, name: str, namespace: str) -> None:
        raise ConnectionError("apiserver unreachable")


def _op(**kwargs: Any) -> VolcanoPyTorchJobOperator:
    return VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", **kwargs)


def _resume(**kwargs: Any) -> Any:
    """The operator's resume part, as ``execute`` builds it."""
    return OperatorParts.of(_op(**kwargs)).resume


def _unreported() -> Store:
    return Store({"volcano_job": REF, "volcano_run": RunRecord("run1", 1, "uid-1").to_store()})


def test_a_job_that_cannot_be_read_is_not_taken_for_killed() -> None:
    assert _resume().interrupted_run(UnreadableApi(), _unreported(), 2) is None


class Api:
    """A hook whose read answers ``job`` (None: not found), then ``after`` once it has been
    read ``reads`` times (a job being deleted, then gone)."""

    def __init__(self, job: dict[str, Any] | None, reads: int = 0, after: Any = None) -> None:
        self.job, self.reads, self.after, self.read = job, reads, after, 0

    def get_job(self, name: str, namespace: str) -> dict[str, Any] | None:
        self.read += 1
        return self.after if self.reads and self.read > self.reads else self.job


def _job(**metadata: Any) -> dict[str, Any]:
    meta = {"name": REF["name"], "namespace": "ns", "uid": "uid-1", **metadata}
    return {"metadata": meta, "status": {"state": {"phase": "Running"}}}


def test_a_kill_is_told_by_the_job_gone_or_going_and_never_by_one_still_running() -> None:
    gone, going = Api(None), Api(_job(deletionTimestamp="2026-12-01T23:00:00Z"), reads=2)
    for api in (gone, going, Api(_job(uid="uid-2"))):  # uid-2: another submission's name
        resumed = _resume().interrupted_run(api, _unreported(), 2)
        assert (resumed.cause, resumed.wandb_resume) == ("killed", "allow")
    assert _resume().interrupted_run(Api(_job()), _unreported(), 2) is None


def test_a_store_that_fails_resumes_nothing_and_fails_nothing() -> None:
    resume = _resume()
    assert resume.interrupted_run(UnreadableApi(), Store(fail=True), 2) is None
    resume.record_cause(Store(fail=True), "uid-1", None)  # no raise


def test_without_a_store_the_log_says_resume_is_unavailable(capsys) -> None:
    assert _resume().interrupted_run(UnreadableApi(), None, 2) is None
    logged = capsys.readouterr()
    assert "resume_on needs Airflow 3.3's task state store" in logged.out + logged.err


def test_a_templated_resume_on_is_checked_once_rendered() -> None:
    op = _op(resume_on="{{ params.resume_on }}")
    op.resume_on = "preempted,preemption"  # as rendered
    with pytest.raises(AirflowException, match="'preemption'"):
        OperatorParts.of(op)  # as execute builds its parts, before any API call


def test_a_sync_wait_cut_by_execution_timeout_is_recorded_as_a_timeout() -> None:
    store, resume = _unreported(), _resume()
    resume.record_timeout(store, REF, KeyboardInterrupt())  # a kill: left to the next try's read
    assert store.values["volcano_run"]["cause"] is None
    resume.record_timeout(store, REF, AirflowTaskTimeout("Timeout, PID: 1"))
    assert store.values["volcano_run"]["cause"] == "timeout"


def test_a_resumed_try_waits_until_the_killed_job_has_stopped() -> None:
    """Its ranks may still be saving on SIGTERM: the resumed job never writes beside them."""
    going = Api(_job(deletionTimestamp="2026-12-01T23:00:00Z"), reads=3)
    assert _resume().interrupted_run(going, _unreported(), 2) is not None
    assert going.read == 4  # the kill's inference, two reads while it went, then gone


def test_a_killed_job_that_never_goes_fails_the_try_instead_of_a_second_writer(
    monkeypatch,
) -> None:
    from airflow_volcano_wandb.parts import resumption

    monkeypatch.setattr(resumption, "DYING_JOB_WAIT", 0.0)
    monkeypatch.setattr(resumption.time, "sleep", lambda _s: None)
    stuck = Api(_job(deletionTimestamp="2026-12-01T23:00:00Z"))
    with pytest.raises(AirflowException, match="not starting a second writer"):
        _resume().interrupted_run(stuck, _unreported(), 2)


def test_a_try_resumed_without_its_deferral_kwargs_still_knows_it_resumed_with_a_stub_ti() -> None:
    """``dag.test()`` resumes a deferred task without ``run``: what ``publish`` pushed is
    read back, the resumed intent with it, so the report still says what the resume saved."""
    ti = StubTaskInstance("d", "t", "r", try_number=2)
    ti.xcom_push("wandb_run_id", "run1")
    ti.xcom_push("wandb_run_url", None)
    assert pulled_run(ti, "t") == {"wandb_run_id": "run1", "wandb_run_url": None}
    ti.xcom_push("resumed_from_intent", 1)
    assert pulled_run(ti, "t")["resumed_from_intent"] == 1

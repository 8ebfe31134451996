"""What the provider does on the Airflow minor it runs on (``airflow_compat``).

``make test-compat`` runs these on every supported minor: each test asserts the full
behaviour on Airflow 3.3 and the documented degraded one on 3.0-3.2, never skips.

A kill of a deferred task: from 3.3 the triggerer calls the trigger's ``on_kill``; before, it
only cancels the trigger and calls ``cleanup()`` (as it does when it stops itself), and the
trigger asks the API server whether its task has left ``deferred``. The API's answer is
stubbed here (``RuntimeTaskInstance.get_task_states`` needs a running triggerer); the
deletion itself is proven on the cluster by ``tests/reliability/test_deferred_kill.py``.
"""

from __future__ import annotations

import asyncio
import logging

import airflow
import pytest
from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
from packaging.version import Version

from airflow_volcano_wandb import airflow_compat
from airflow_volcano_wandb.triggers import kill
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
from test_support.cluster_jobs import DeferredTaskInstance

ON_3_3 = Version(airflow.__version__) >= Version("3.3")


def test_the_capability_follows_the_installed_release():
    assert Version(Version(airflow.__version__).base_version) == airflow_compat.INSTALLED_AIRFLOW
    assert airflow_compat.TRIGGER_ON_KILL is ON_3_3


def _answer(monkeypatch, states=None, error=None) -> list[dict]:
    calls: list[dict] = []

    def get_task_states(**query):
        calls.append(query)
        if error:
            raise error
        return states

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(get_task_states))
    return calls


@pytest.mark.parametrize(
    ("state", "left"),
    [("deferred", False), ("failed", True), ("success", True), ("skipped", True), (None, True)],
)
def test_a_task_has_left_deferral_unless_the_api_says_deferred(monkeypatch, state, left):
    calls = _answer(monkeypatch, {"run": {"wait": state}})
    assert asyncio.run(airflow_compat.task_left_deferral(DeferredTaskInstance())) is left
    assert calls == [
        {"dag_id": "avw_test", "task_ids": ["wait"], "run_ids": ["run"], "map_index": -1}
    ]


def test_a_mapped_task_is_looked_up_under_its_map_index(monkeypatch):
    _answer(monkeypatch, {"run": {"wait_3": "deferred", "wait": "failed"}})
    assert (
        asyncio.run(airflow_compat.task_left_deferral(DeferredTaskInstance(map_index=3))) is False
    )


def test_a_task_instance_gone_from_the_db_has_left(monkeypatch):
    _answer(monkeypatch, {})
    assert asyncio.run(airflow_compat.task_left_deferral(DeferredTaskInstance())) is True


def test_an_unreadable_state_is_no_answer(monkeypatch):
    _answer(monkeypatch, error=ConnectionError("API server gone"))
    assert asyncio.run(airflow_compat.task_left_deferral(DeferredTaskInstance())) is None


def _trigger(monkeypatch, left: bool | None, **kwargs) -> tuple[VolcanoJobTrigger, list[str]]:
    """A trigger whose job deletion is recorded, and whose task has ``left`` deferral."""
    trigger = VolcanoJobTrigger(job_name="j", namespace="ns", job_uid="u", **kwargs)
    trigger.task_instance = DeferredTaskInstance()
    deleted: list[str] = []

    async def delete_job(stopped: VolcanoJobTrigger) -> None:
        deleted.append(stopped.job_name)

    async def task_left(ti) -> bool | None:
        return left

    monkeypatch.setattr(kill, "delete_job", delete_job)
    monkeypatch.setattr(airflow_compat, "task_left_deferral", task_left)
    return trigger, deleted


def test_a_user_kill_deletes_the_job_through_what_this_release_calls(monkeypatch):
    trigger, deleted = _trigger(monkeypatch, left=True)
    if ON_3_3:  # the triggerer calls on_kill, then cleanup(): one deletion, by on_kill
        asyncio.run(trigger.on_kill())
        assert deleted == ["j"]
        asyncio.run(trigger.cleanup())
        assert deleted == ["j"]
    else:  # only cleanup() is called, and the task is no longer deferred
        asyncio.run(trigger.cleanup())
        assert deleted == ["j"]


@pytest.mark.parametrize("left", [False, None])
def test_a_triggerer_stopping_or_an_unreadable_state_leaves_the_job(monkeypatch, left):
    trigger, deleted = _trigger(monkeypatch, left=left)
    asyncio.run(trigger.cleanup())
    assert deleted == []


@pytest.mark.parametrize("left", [False, None])
def test_on_kill_of_a_handover_or_an_unreadable_state_leaves_the_job(
    monkeypatch, caplog, capsys, left
):
    """Airflow 3.3 cancels a trigger moving to another triggerer with the kill's own message
    and calls on_kill: a task still deferred, or one whose state cannot be read, is no kill."""
    trigger, deleted = _trigger(monkeypatch, left=left)
    with caplog.at_level(logging.INFO):
        asyncio.run(trigger.on_kill())
    assert deleted == []
    # The trigger logs through structlog on 3.3 (stdout), through logging before.
    said = caplog.text + capsys.readouterr().out
    assert "left running" in said
    if left is False:
        assert "handed over to another triggerer" in said


def test_on_kill_without_a_task_instance_cannot_confirm_a_kill(monkeypatch):
    trigger, deleted = _trigger(monkeypatch, left=True)
    trigger.task_instance = None  # run in-process: there is no Airflow to ask
    asyncio.run(trigger.on_kill())
    assert deleted == []


def test_a_fired_trigger_or_delete_on_kill_false_never_deletes(monkeypatch):
    trigger, deleted = _trigger(monkeypatch, left=True)
    trigger._fired = True
    asyncio.run(trigger.cleanup())
    asyncio.run(trigger.on_kill())
    kept, kept_deleted = _trigger(monkeypatch, left=True, delete_on_kill=False)
    asyncio.run(kept.cleanup())
    asyncio.run(kept.on_kill())
    assert deleted == kept_deleted == []


def test_the_missing_on_kill_is_warned_about_once(monkeypatch, caplog):
    monkeypatch.setattr(airflow_compat, "_warned", set())
    with caplog.at_level(logging.WARNING, logger=airflow_compat.__name__):
        airflow_compat.warn_if_no_trigger_on_kill()
        airflow_compat.warn_if_no_trigger_on_kill()
    warnings = [r.getMessage() for r in caplog.records if r.name == airflow_compat.__name__]
    if ON_3_3:
        assert warnings == []
    else:
        (warning,) = warnings
        assert "on_kill" in warning and "Airflow 3.3" in warning
        assert warning.startswith(f"Airflow {airflow_compat.INSTALLED_AIRFLOW}:")


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == airflow_compat.__name__]


def test_a_retry_policy_is_passed_on_3_3_and_left_out_before_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(airflow_compat, "_warned", set())
    policy = object()
    with caplog.at_level(logging.WARNING, logger=airflow_compat.__name__):
        first = airflow_compat.retry_policy_kwargs(lambda: policy)
        second = airflow_compat.retry_policy_kwargs(lambda: policy)
    assert airflow_compat.RETRY_POLICY is ON_3_3
    if ON_3_3:
        assert first == second == {"retry_policy": policy}
        assert _warnings(caplog) == []
    else:  # the policy is never built (its names are not in airflow.sdk): retries alone
        assert first == second == {}
        (warning,) = _warnings(caplog)
        assert "retry_policy" in warning and "Airflow 3.3" in warning


def test_the_example_retraining_task_has_its_policy_on_3_3_only():
    from test_support.airflow_compat import dag_bag
    from tests.conftest import REPO

    bag = dag_bag(str(REPO / "dags"))
    assert bag.import_errors == {}
    train = bag.dags["volcano_pytorch_retraining"].get_task("train")
    assert train.retries == 2
    if ON_3_3:
        assert type(train.retry_policy).__name__ == "ExceptionRetryPolicy"
    else:
        assert getattr(train, "retry_policy", None) is None


class _Store:
    def __init__(self) -> None:
        self.data: dict = {}

    def get(self, key, default=None):
        return self.data.get(key, default)

    def set(self, key, value):
        self.data[key] = value


def test_the_asset_state_store_or_variables_before_3_3(monkeypatch, caplog):
    from airflow.sdk import Asset, Variable

    monkeypatch.setattr(airflow_compat, "_warned", set())
    asset = Asset("avw_model")
    store = _Store()
    context = {"asset_state_store": {asset: store}} if ON_3_3 else {}
    variables: dict[str, str] = {}
    monkeypatch.setattr(
        Variable, "get", staticmethod(lambda key, default=None: variables.get(key, default))
    )
    monkeypatch.setattr(
        Variable, "set", staticmethod(lambda key, value: variables.__setitem__(key, value))
    )
    with caplog.at_level(logging.WARNING, logger=airflow_compat.__name__):
        state = airflow_compat.asset_state(context, asset)
        assert state.get("best") is None and state.get("best", 1) == 1
        state.set("best", {"accuracy": 0.9})
        again = airflow_compat.asset_state(context, asset)
        assert again.get("best") == {"accuracy": 0.9}
    if ON_3_3:
        assert state is store and variables == {} and _warnings(caplog) == []
    else:
        assert variables == {"asset_state:avw_model:best": '{"accuracy": 0.9}'}
        (warning,) = _warnings(caplog)
        assert "asset state store" in warning and "asset_state:avw_model:<key>" in warning
        with pytest.raises(ValueError):
            state.set("best", None)


def test_the_task_state_store_or_none_before_3_3_with_one_warning(monkeypatch, caplog):
    monkeypatch.setattr(airflow_compat, "_warned", set())
    store = _Store()
    context = {"task_state_store": store} if ON_3_3 else {}
    with caplog.at_level(logging.WARNING, logger=airflow_compat.__name__):
        found = [airflow_compat.task_state_store(context) for _ in range(2)]
    assert airflow_compat.TASK_STATE_STORE is ON_3_3
    if ON_3_3:
        assert found == [store, store] and _warnings(caplog) == []
    else:
        assert found == [None, None]
        (warning,) = _warnings(caplog)
        assert "task state store" in warning and "labels" in warning

"""Helpers for the reliability tests: drive the operator's real code path without a DAG run.

``execute_operator`` calls ``VolcanoPyTorchJobOperator.execute`` with a minimal context (a
task instance that records its XCom pushes), exactly as a worker would after rendering the
templated fields. With ``deferrable=True`` it returns the ``VolcanoJobTrigger`` the operator
deferred with, so a test can run many such triggers in one event loop like a triggerer does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pendulum

from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.sensors import VolcanoJobSensor
from airflow_volcano_wandb.testing import cluster as local_cluster
from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger
from test_support.cluster_jobs import SIM_DURATION, seed_template, wait_until
from test_support.cluster_jobs import list_jobs as list_jobs  # the tests' support.list_jobs

GROUP, VERSION = "batch.volcano.sh", "v1alpha1"


@dataclass
class StubTaskInstance:
    """The part of a RuntimeTaskInstance the operator reads, with XComs kept in a dict."""

    dag_id: str
    task_id: str
    run_id: str
    try_number: int = 1
    map_index: int = -1
    log_url: str | None = None
    pushed: dict[str, Any] = field(default_factory=dict)

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str, key: str, map_indexes: int | None = None) -> Any:
        assert task_ids == self.task_id, "the operator reads only its own XComs"
        assert map_indexes in (None, self.map_index), "and only its own map index's"
        return self.pushed.get(key)


@dataclass
class StubDagRun:
    logical_date: Any = field(default_factory=lambda: pendulum.datetime(2026, 1, 1, tz="UTC"))


def context_for(ti: StubTaskInstance) -> dict[str, Any]:
    return {"ti": ti, "task_instance": ti, "dag_run": StubDagRun()}


class MemoryStore:
    """A task state store: one task instance's, kept across its tries."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


def operator(**kwargs: Any) -> VolcanoPyTorchJobOperator:
    defaults: dict[str, Any] = {
        "task_id": "train",
        "image_uri": "example.org/avw/trainer:test",
        "wandb_entity": "test-entity",
        "wandb_project": "test-project",
        "wandb_mode": "offline",
        "poll_interval": 1,
    }
    defaults.update(kwargs)
    return VolcanoPyTorchJobOperator(**defaults)


def master_only_operator(namespace: str, **kwargs: Any) -> VolcanoPyTorchJobOperator:
    """A deferrable operator whose job is one master that trains for ten minutes (no worker)."""
    template = seed_template(master={SIM_DURATION: "600"})
    return operator(
        template=template, namespace=namespace, replicas={"worker": 0}, deferrable=True, **kwargs
    )


def execute_operator(op: VolcanoPyTorchJobOperator, ti: StubTaskInstance) -> Any:
    """Run ``op.execute``; a deferral is returned as its trigger instead of raised."""
    from airflow_volcano_wandb.airflow_compat import TaskDeferred

    try:
        return op.execute(context_for(ti))
    except TaskDeferred as deferred:
        return deferred.trigger


def poke_until_verdict(
    job: dict[str, Any],
    namespace: str,
    dag_id: str,
    *,
    timeout: float,
    wandb_conn_id: str | None = None,
    **options: Any,
) -> None:
    """Poke a sensor of ``job`` every second until it answers: returns on success, raises
    what the sensor raises for a failed wait (``options`` are the sensor's own)."""
    sensor = VolcanoJobSensor(
        task_id="wait",
        job_name=job["metadata"]["name"],
        namespace=namespace,
        job_uid=job["metadata"]["uid"],
        wandb_conn_id=wandb_conn_id,
        **options,
    )
    ti = StubTaskInstance(dag_id, "wait", "sensor")
    wait_until(lambda: sensor.poke({"ti": ti}), timeout=timeout, interval=1, what="a verdict")


def trigger_of(job: dict, namespace: str, **options: Any) -> VolcanoJobTrigger:
    """The trigger a deferred task would hand the triggerer for ``job``."""
    return VolcanoJobTrigger(
        job_name=job["metadata"]["name"],
        namespace=namespace,
        job_uid=job["metadata"]["uid"],
        **options,
    )


async def first_event(trigger) -> dict[str, Any] | None:
    """The first event's payload, as a triggerer takes it."""
    async for event in trigger.run():
        return event.payload
    return None


async def collect_events(trigger, timeout: float) -> list[dict[str, Any]]:
    """Every event the trigger yields (a triggerer takes the first; we check there is one)."""
    events = []

    async def drain() -> None:
        async for event in trigger.run():
            events.append(event.payload)

    await asyncio.wait_for(drain(), timeout)
    return events


def completing_template(after: str) -> dict[str, Any]:
    """The seed, whose master ends after ``after`` seconds (its workers run on): the job
    completes (the seed's master policy)."""
    return seed_template(master={SIM_DURATION: after}, worker={SIM_DURATION: "600"})


def defer_each(plan: dict[str, tuple[Any, str]], namespace: str, dag_id: str) -> dict[str, Any]:
    """Defer one task per entry of ``plan`` (its run id: ``template, expected outcome``); the
    triggers, by run id."""
    triggers = {}
    for key, (template, _) in plan.items():
        op = operator(template=template, namespace=namespace, deferrable=True)
        triggers[key] = execute_operator(op, StubTaskInstance(dag_id, "train", key))
    return triggers


def assert_one_verdict_each(
    plan: dict[str, tuple[Any, str]], triggers: dict[str, Any], results: list[list[dict]]
) -> None:
    """Each trigger of ``defer_each`` fired once, with the outcome ``plan`` expects of it."""
    for (key, (_, expected)), events in zip(plan.items(), results, strict=True):
        assert len(events) == 1, (key, events)
        assert events[0]["outcome"] == expected, (key, events[0])
        assert events[0]["job_uid"] == triggers[key].job_uid


def kubernetes_conn_env(kubeconfig: Path) -> str:
    return json.dumps({"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}})


@contextlib.contextmanager
def private_cluster(prefix: str = "avw-rel-") -> Iterator[local_cluster.ClusterInfo]:
    """A cluster of this test's own (fault tests restart its components); stopped after."""
    state_dir = Path(tempfile.mkdtemp(prefix=prefix))
    info = local_cluster.up(state_dir, nodes=2)
    ok = False
    try:
        yield info
        ok = True
    finally:
        local_cluster.down(state_dir, quiet=True)
        if ok:
            shutil.rmtree(state_dir, ignore_errors=True)


def create_namespace(kubeconfig: Path, prefix: str) -> str:
    from airflow_volcano_wandb.testing.pytest_plugin import VolcanoCluster

    handle = VolcanoCluster(
        state_dir=kubeconfig.parent,
        kubeconfig=kubeconfig,
        server="",
        nodes=0,
        gpus_per_node=0,
        owned=False,
    )
    return handle.create_namespace(prefix)

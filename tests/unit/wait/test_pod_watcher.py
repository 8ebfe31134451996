"""NamespacePodWatcher, and the waits reading pods from it, against a scripted apiserver.

The list+watch machinery it shares with the job watch (reconnects, backoff, 410, health) is
tested in test_job_watcher.py; here: what the pod watch keeps, under which key, and when a
wait's step reads pods from it rather than LISTing them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow_volcano_wandb.job.ownership import MANAGED_BY, MANAGED_BY_LABEL
from airflow_volcano_wandb.wait import job_watcher, namespace_watch, step_io
from airflow_volcano_wandb.wait.judge import JobTarget
from airflow_volcano_wandb.wait.pod_watcher import (
    WATCHED_PODS_SELECTOR,
    NamespacePodWatcher,
    kept_pod,
)
from airflow_volcano_wandb.wait.step import StepMemory

NS = "team"
LOG = logging.getLogger("test")


def a_pod(job: str, name: str, restarts: int = 0, version: int = 1) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": f"uid-{name}",
            "resourceVersion": str(version),
            "labels": {"volcano.sh/job-name": job, MANAGED_BY_LABEL: MANAGED_BY},
            "ownerReferences": [{"uid": f"{job}-uid"}],
            "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {
            "nodeName": "node-1",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "containers": [
                {
                    "name": "pytorch",
                    "image": "trainer:1",
                    "env": [{"name": "BIG", "value": "x" * 1000}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "pytorch", "restartCount": restarts}],
        },
    }


class FakePodHook:
    """The pod calls of AsyncVolcanoHook, over scripted pods; every call is counted."""

    def __init__(self, pods: list[dict]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        self.calls: list[tuple[str, Any]] = []
        self.stream: asyncio.Queue | None = None
        self.limits: list[int] = []

    @contextlib.asynccontextmanager
    async def get_conn(self) -> AsyncIterator[object]:
        yield object()

    async def list_pods_page(self, api, namespace, label_selector, limit, continue_token):
        self.calls.append(("list", label_selector))
        self.limits.append(limit)
        return [copy.deepcopy(p) for p in self.pods.values()], "10", None

    async def watch_pods(self, api, namespace, resource_version, timeout_seconds, label_selector):
        self.calls.append(("watch", label_selector))
        self.stream = asyncio.Queue()
        while True:
            yield await self.stream.get()

    async def list_job_pods(self, api, job_name, namespace):
        self.calls.append(("list_job_pods", job_name))
        pods = self.pods.values()
        return [
            copy.deepcopy(p)
            for p in pods
            if p["metadata"]["labels"]["volcano.sh/job-name"] == job_name
        ]

    async def read_job(self, api, name, namespace):
        self.calls.append(("read_job", name))
        return copy.deepcopy(JOB)


def a_job(labelled: bool = True) -> dict:
    labels = {MANAGED_BY_LABEL: MANAGED_BY} if labelled else {}
    return {
        "metadata": {"name": "j", "namespace": NS, "uid": "j-uid"},
        "spec": {
            "minAvailable": 2,
            "tasks": [
                {"name": "master", "replicas": 1, "template": {"metadata": {"labels": labels}}},
                {"name": "worker", "replicas": 1, "template": {"metadata": {"labels": labels}}},
            ],
        },
        "status": {
            "state": {"phase": "Running"},
            "running": 2,
            "taskStatusCount": {
                "master": {"phase": {"Running": 1}},
                "worker": {"phase": {"Running": 1}},
            },
        },
    }


JOB = a_job()


async def until(predicate, timeout: float = 3.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)
    return value


def test_pods_are_kept_by_their_job_with_only_what_is_read():
    hook = FakePodHook(
        [a_pod("j", "j-master-0"), a_pod("j", "j-worker-0"), a_pod("k", "k-master-0")]
    )

    async def main():
        watch = NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR)
        assert watch.objects("j") is None  # not synced: no answer, not "no pods"
        watch.subscribe("j")
        await until(watch.synced.is_set)
        try:
            names = sorted(p["metadata"]["name"] for p in watch.objects("j"))
            assert names == ["j-master-0", "j-worker-0"]
            assert watch.objects("none") == []
            kept = watch.objects("k")[0]
            assert "managedFields" not in kept["metadata"]
            assert "volumes" not in kept["spec"]
            assert kept["spec"]["containers"] == [
                {
                    "name": "pytorch",
                    "image": "trainer:1",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ]
            assert kept["spec"]["nodeName"] == "node-1"
            assert kept["status"]["containerStatuses"][0]["restartCount"] == 0

            await until(lambda: hook.stream)
            hook.stream.put_nowait(("MODIFIED", a_pod("j", "j-master-0", restarts=3, version=11)))
            hook.stream.put_nowait(("DELETED", a_pod("k", "k-master-0", version=12)))
            await until(lambda: watch.objects("k") == [])
            master = next(p for p in watch.objects("j") if p["metadata"]["name"] == "j-master-0")
            assert master["status"]["containerStatuses"][0]["restartCount"] == 3
            assert hook.calls[:2] == [
                ("list", WATCHED_PODS_SELECTOR),
                ("watch", WATCHED_PODS_SELECTOR),
            ]
        finally:
            await watch.stop()
        assert watch.objects("j") is None  # a stopped watch answers nothing

    asyncio.run(asyncio.wait_for(main(), 10))


def test_kept_pod_leaves_the_original_untouched():
    pod = a_pod("j", "p")
    kept_pod(pod)
    assert "managedFields" in pod["metadata"] and "volumes" in pod["spec"]


def _step(hook: FakePodHook, job: dict, pods_watch: NamespacePodWatcher | None) -> Any:
    """One step of a running job's wait with a restart budget of 1, pods due now."""

    async def main():
        watcher = job_watcher.NamespaceJobWatcher(lambda: hook, NS)
        if pods_watch is not None:
            pods_watch.subscribe("j")
            await until(pods_watch.synced.is_set)
        target = JobTarget(job_name="j", namespace=NS, job_uid="j-uid", max_container_restarts=1)
        try:
            return await step_io.take_step(
                watcher, job, target, StepMemory(), LOG, fresh=False, pod_watch=pods_watch
            )
        finally:
            if pods_watch is not None:
                await pods_watch.stop()

    return asyncio.run(asyncio.wait_for(main(), 10))


def test_a_step_reads_a_managed_jobs_pods_from_the_pod_watch_and_lists_none():
    hook = FakePodHook([a_pod("j", "j-master-0"), a_pod("j", "j-worker-0")])
    memory, result = _step(hook, JOB, NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR))
    assert result is None  # within its budget
    assert memory.pods_read_at is not None  # the pods were looked at
    assert [c for c in hook.calls if c[0] == "list_job_pods"] == []


def test_a_job_whose_pods_the_watch_does_not_select_is_listed():
    hook = FakePodHook([a_pod("j", "j-master-0")])
    _step(hook, a_job(labelled=False), NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR))
    assert ("list_job_pods", "j") in hook.calls


def test_without_a_pod_watch_the_pods_are_listed():
    hook = FakePodHook([a_pod("j", "j-master-0")])
    _step(hook, JOB, None)
    assert ("list_job_pods", "j") in hook.calls


def test_a_crash_loop_seen_in_the_watch_is_confirmed_by_a_fresh_get_and_list():
    hook = FakePodHook([a_pod("j", "j-master-0", restarts=5), a_pod("j", "j-worker-0")])
    _, result = _step(hook, JOB, NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR))
    assert result is not None and result.outcome.name == "CRASH_LOOP"
    reads = [c[0] for c in hook.calls if c[0] in ("read_job", "list_job_pods")]
    assert reads == ["read_job", "list_job_pods"]  # the confirmation, from the apiserver


def test_a_crash_loop_the_apiserver_no_longer_shows_is_no_verdict():
    hook = FakePodHook([a_pod("j", "j-master-0", restarts=5), a_pod("j", "j-worker-0")])

    async def stale_then_healed(api, job_name, namespace):
        hook.calls.append(("list_job_pods", job_name))
        return [a_pod("j", "j-master-0"), a_pod("j", "j-worker-0")]  # a new incarnation

    watch = NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR)
    hook.list_job_pods = stale_then_healed  # type: ignore[method-assign]
    _, result = _step(hook, JOB, watch)
    assert result is None


def test_pod_watches_are_shared_per_connection_and_namespace_apart_from_job_watches():
    async def main():
        hook = FakePodHook([])
        one = job_watcher.shared_pod_watcher("conn", NS, lambda: hook)
        assert job_watcher.shared_pod_watcher("conn", NS, lambda: hook) is one
        assert job_watcher.shared_pod_watcher("conn", "other", lambda: hook) is not one
        assert job_watcher.shared_watcher("conn", NS, lambda: hook) is not one
        assert one.label_selector == WATCHED_PODS_SELECTOR
        assert namespace_watch.active_watches(NamespacePodWatcher) == 2
        assert job_watcher.active_watchers() == 1
        namespace_watch._watches.clear()

    asyncio.run(main())


def _step_while_pod_watch_lists(fail: bool) -> tuple[FakePodHook, Any]:
    """One step while the pod watch's first LIST hangs (``fail``: after one that failed)."""
    hook = FakePodHook([a_pod("j", "j-master-0", restarts=5), a_pod("j", "j-worker-0")])
    listed = asyncio.Event()
    attempts = []

    async def hanging_list(api, namespace, label_selector, limit, continue_token):
        attempts.append(label_selector)
        if fail and len(attempts) == 1:
            raise ConnectionResetError("reset")
        listed.set()
        await asyncio.Event().wait()  # the LIST never completes within the test

    hook.list_pods_page = hanging_list  # type: ignore[method-assign]

    async def main():
        watcher = job_watcher.NamespaceJobWatcher(lambda: hook, NS)
        pods = NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR)
        pods.subscribe("j")
        await until(lambda: attempts and (not fail or pods.failing_since))
        target = JobTarget(job_name="j", namespace=NS, job_uid="j-uid", max_container_restarts=1)
        try:
            return await step_io.take_step(
                watcher, JOB, target, StepMemory(), LOG, fresh=False, pod_watch=pods
            )
        finally:
            await pods.stop()

    return hook, asyncio.run(asyncio.wait_for(main(), 10))


def test_while_the_pod_watch_lists_a_step_sends_no_list_of_its_own():
    hook, (memory, result) = _step_while_pod_watch_lists(fail=False)
    assert result is None and memory.pods_read_at is not None  # looked, judged nothing yet
    assert [c for c in hook.calls if c[0] == "list_job_pods"] == []


def test_while_the_pod_watch_fails_a_step_lists_the_pods_and_keeps_its_verdicts():
    hook, (_, result) = _step_while_pod_watch_lists(fail=True)
    assert result is not None and result.outcome.name == "CRASH_LOOP"
    assert [c for c in hook.calls if c[0] == "list_job_pods"] == [
        ("list_job_pods", "j"),
        ("list_job_pods", "j"),  # the verdict's confirmation
    ]


def test_the_pod_watch_lists_in_pages_of_a_hundred_pods():
    # A page is parsed whole before its pods' copies are kept: small pages keep the LIST's
    # peak (and the memory it leaves behind) small. The job watch pages by 500.
    hook = FakePodHook([a_pod("j", "j-master-0")])
    _step(hook, JOB, NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR))
    assert hook.limits == [100]
    assert job_watcher.NamespaceJobWatcher.list_page_size == 500


def test_two_waits_sharing_a_job_watch_each_read_their_own_pod_watch():
    # One namespace, one job watch; k's wait has a pod watch, j's has none (say a trigger of a
    # release or connection without one). Each reads its own: k's wait setting its pod watch
    # on the shared job watch, as the trigger once did, would have j's wait read it too.
    hook = FakePodHook(
        [
            a_pod("j", "j-master-0", restarts=5),
            a_pod("j", "j-worker-0"),
            a_pod("k", "k-master-0"),
            a_pod("k", "k-worker-0"),
        ]
    )
    job_k = copy.deepcopy(JOB)
    job_k["metadata"].update(name="k", uid="k-uid")

    async def main():
        watcher = job_watcher.NamespaceJobWatcher(lambda: hook, NS)
        pods_k = NamespacePodWatcher(lambda: hook, NS, WATCHED_PODS_SELECTOR)
        pods_k.subscribe("k")
        await until(pods_k.synced.is_set)

        async def step(job: dict, pod_watch: NamespacePodWatcher | None) -> Any:
            name = job["metadata"]["name"]
            target = JobTarget(
                job_name=name, namespace=NS, job_uid=f"{name}-uid", max_container_restarts=1
            )
            return await step_io.take_step(
                watcher, job, target, StepMemory(), LOG, fresh=False, pod_watch=pod_watch
            )

        try:
            return await step(job_k, pods_k), await step(JOB, None)
        finally:
            await pods_k.stop()

    (memory_k, result_k), (_, result_j) = asyncio.run(asyncio.wait_for(main(), 10))
    assert result_k is None and memory_k.pods_read_at is not None  # k's pods, from its watch
    assert result_j is not None and result_j.outcome.name == "CRASH_LOOP"
    assert [c for c in hook.calls if c[0] == "list_job_pods"] == [
        ("list_job_pods", "j"),  # j's look: it has no pod watch
        ("list_job_pods", "j"),  # the verdict's confirmation
    ]

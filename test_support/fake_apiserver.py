"""A scripted stand-in for the apiserver, for NamespaceJobWatcher's tests (no cluster, no sleeps).

``FakeCluster`` plays the apiserver: it holds jobs, pages LISTs, streams watch events, and
fails the next calls as a test scripts it. Each reconnect of the watcher asks for a new
``FakeHook``, so the tests can see that credentials would be loaded again.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from kubernetes_asyncio.client.exceptions import ApiException

from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher

NS = "team"


def api_error(status: int, retry_after: str | None = None) -> ApiException:
    exc = ApiException(status=status, reason=f"HTTP {status}")
    exc.headers = {"Retry-After": retry_after} if retry_after else {}
    exc.body = '{"message": "said the apiserver"}'
    return exc


def a_job(name: str, version: int = 1) -> dict:
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "resourceVersion": str(version),
            "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
        },
        "status": {"state": {"phase": "Running"}},
    }


class FakeClient:
    def __init__(self) -> None:
        self.closed = False


class FakeCluster:
    """The apiserver as the watcher sees it, with failures scripted per call."""

    def __init__(self, *jobs: dict) -> None:
        self.jobs = {job["metadata"]["name"]: job for job in jobs}
        self.version = 100
        self.list_failures: list[BaseException] = []
        self.watch_failures: list[BaseException] = []
        self.read_failures: list[BaseException] = []
        self.expire_next_continue_token = False
        self.hooks: list[FakeHook] = []
        self.lists: list[dict[str, Any]] = []
        self.watches: list[dict[str, Any]] = []
        self.reads: list[FakeClient] = []
        self._stream: asyncio.Queue | None = None

    def hook(self) -> FakeHook:
        hook = FakeHook(self)
        self.hooks.append(hook)
        return hook

    def put(self, job: dict) -> None:
        """Create or change a job; an open watch sees it."""
        self.version += 1
        job["metadata"]["resourceVersion"] = str(self.version)
        self.jobs[job["metadata"]["name"]] = job
        if self._stream is not None:
            self._stream.put_nowait(("MODIFIED", copy.deepcopy(job)))

    def break_watch(self, exc: BaseException) -> None:
        assert self._stream is not None, "no watch is open"
        self._stream.put_nowait(exc)


class FakeHook:
    """The parts of AsyncVolcanoHook the watcher calls."""

    def __init__(self, cluster: FakeCluster) -> None:
        self.cluster = cluster
        self.clients: list[FakeClient] = []

    @contextlib.asynccontextmanager
    async def get_conn(self) -> AsyncIterator[FakeClient]:
        client = FakeClient()
        self.clients.append(client)
        try:
            yield client
        finally:
            client.closed = True

    async def list_jobs_page(
        self, api, namespace, label_selector, limit, continue_token
    ) -> tuple[list[dict], str, str | None]:
        cluster = self.cluster
        cluster.lists.append({"selector": label_selector, "limit": limit, "token": continue_token})
        if cluster.list_failures:
            raise cluster.list_failures.pop(0)
        if continue_token and cluster.expire_next_continue_token:
            cluster.expire_next_continue_token = False
            raise api_error(410)
        names = sorted(cluster.jobs)
        start = int(continue_token or 0)
        following = str(start + limit) if start + limit < len(names) else None
        page = [copy.deepcopy(cluster.jobs[n]) for n in names[start : start + limit]]
        return page, str(cluster.version), following

    async def watch_jobs(
        self, api, namespace, resource_version, timeout_seconds, label_selector=None
    ) -> AsyncIterator[tuple[str, dict]]:
        cluster = self.cluster
        cluster.watches.append({"selector": label_selector, "from": resource_version})
        if cluster.watch_failures:
            raise cluster.watch_failures.pop(0)
        stream = cluster._stream = asyncio.Queue()
        try:
            while True:
                item = await stream.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            cluster._stream = None

    async def read_job(self, api, name, namespace) -> dict | None:
        cluster = self.cluster
        cluster.reads.append(api)
        if cluster.read_failures:
            raise cluster.read_failures.pop(0)
        job = cluster.jobs.get(name)
        return copy.deepcopy(job) if job is not None else None


async def until(predicate: Callable[[], Any], timeout: float = 3.0) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.001)
    return value


def record_delays(watcher: NamespaceJobWatcher) -> list[float]:
    """The waits the watcher chooses before each retry."""
    delays: list[float] = []
    failed = watcher._failed

    def spy(exc: Exception, verb: str) -> float:
        delays.append(failed(exc, verb))
        return delays[-1]

    watcher._failed = spy  # type: ignore[method-assign]
    return delays


def run(scenario: Callable[[FakeCluster, NamespaceJobWatcher], Any], *jobs: dict, **kw) -> Any:
    cluster = FakeCluster(*jobs)

    async def main():
        watcher = NamespaceJobWatcher(cluster.hook, NS, **kw)
        try:
            return await asyncio.wait_for(scenario(cluster, watcher), 10)
        finally:
            await watcher.stop()

    return asyncio.run(main())

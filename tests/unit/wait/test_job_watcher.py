"""NamespaceJobWatcher against a scripted stand-in for the apiserver (no cluster, no sleeps).

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

import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config.config_exception import ConfigException

from airflow_volcano_wandb.hooks.kubernetes_api import KubernetesPermissionError, describe_failure
from airflow_volcano_wandb.wait import job_watcher, namespace_watch
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


@pytest.fixture(autouse=True)
def fast(monkeypatch):
    """Backoffs of milliseconds, so a test takes no time; a watch is never 'stable' unless a
    test says so."""
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_INITIAL", 0.001)
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_MAX", 0.5)
    monkeypatch.setattr(namespace_watch, "STABLE_WATCH_SECONDS", 3600.0)
    monkeypatch.setattr(job_watcher, "FETCH_BACKOFF_INITIAL", 0.001)


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


def test_synced_is_cleared_the_moment_the_watch_fails_and_the_cache_goes_unanswered():
    async def scenario(cluster, watcher):
        subscription = watcher.subscribe("a")
        await until(watcher.synced.is_set)
        assert watcher.job("a")["metadata"]["name"] == "a"
        await until(lambda: cluster._stream)
        subscription.changed.clear()
        cluster.list_failures = [api_error(503)] * 3  # keep it down for a while
        cluster.break_watch(api_error(500))
        await until(lambda: not watcher.synced.is_set())
        assert watcher.job("a") is None  # a stale copy is not handed out
        assert subscription.changed.is_set()  # the waiter hears of it
        await until(watcher.synced.is_set)
        assert watcher.job("a") is not None

    run(scenario, a_job("a"))


def test_every_reconnect_builds_a_new_hook_and_client():
    async def scenario(cluster, watcher):
        watcher.subscribe("a")
        for _ in range(2):
            await until(lambda: cluster._stream)
            cluster.break_watch(ConnectionResetError("reset by peer"))
            await until(lambda: not watcher.synced.is_set())
        await until(lambda: cluster._stream)
        assert len(cluster.hooks) == 3  # credentials loaded afresh each time
        assert [len(hook.clients) for hook in cluster.hooks] == [1, 1, 1]
        assert [hook.clients[0].closed for hook in cluster.hooks] == [True, True, False]

    run(scenario, a_job("a"))


def test_a_403_is_retried_reported_and_forgotten_once_granted(monkeypatch):
    monkeypatch.setattr(namespace_watch, "STABLE_WATCH_SECONDS", 0.05)

    async def scenario(cluster, watcher):
        cluster.list_failures = [api_error(403)] * 3
        cluster.watch_failures = [api_error(403)]
        subscription = watcher.subscribe("a")
        await until(lambda: watcher.failing_since is not None)
        began = watcher.failing_since
        assert "Kubernetes denied 'list' on 'jobs.batch.volcano.sh'" in watcher.last_failure
        assert f"in namespace '{NS}'" in watcher.last_failure
        assert subscription.changed.is_set()
        await until(lambda: "'watch'" in watcher.last_failure)
        assert watcher.failing_since == began  # the same run of failures
        await until(watcher.synced.is_set)
        subscription.changed.clear()
        await until(lambda: watcher.failing_since is None)
        assert watcher.last_failure == ""
        assert subscription.changed.is_set()  # recovery wakes waiters too
        assert len(cluster.lists) == 5  # 3 refused, 1 before the refused watch, 1 good

    run(scenario, a_job("a"))


def test_a_list_followed_by_a_failing_watch_does_not_reset_the_backoff():
    async def scenario(cluster, watcher):
        cluster.watch_failures = [api_error(503)] * 5
        delays = record_delays(watcher)
        watcher.subscribe("a")
        await until(lambda: watcher.failing_since is not None)
        began = watcher.failing_since
        await until(lambda: len(cluster.watches) == 6)
        # Each LIST succeeded, yet each wait is longer than the last: no relist storm.
        assert delays == sorted(delays) and len(set(delays)) == 5, delays
        assert watcher.failing_since == began

    run(scenario, a_job("a"))


def test_a_watch_that_stays_up_resets_the_backoff(monkeypatch):
    monkeypatch.setattr(namespace_watch, "STABLE_WATCH_SECONDS", 0.05)

    async def scenario(cluster, watcher):
        cluster.list_failures = [api_error(503)] * 4
        delays = record_delays(watcher)
        watcher.subscribe("a")
        await until(lambda: watcher.synced.is_set() and watcher.failing_since is None)
        cluster.break_watch(api_error(503))
        await until(lambda: len(delays) == 5)
        assert delays[4] < delays[3], delays  # started over after the stable watch
        assert delays[4] <= 1.5 * namespace_watch.RECONNECT_BACKOFF_INITIAL

    run(scenario, a_job("a"))


@pytest.mark.parametrize("verb", ["list", "watch"])
def test_retry_after_of_a_429_is_honoured(verb):
    async def scenario(cluster, watcher):
        failures = cluster.list_failures if verb == "list" else cluster.watch_failures
        failures.append(api_error(429, retry_after="0.2"))
        delays = record_delays(watcher)
        watcher.subscribe("a")
        await until(lambda: "throttled" in watcher.last_failure)
        await until(lambda: len(cluster.watches) == (2 if verb == "watch" else 1))
        assert delays[0] >= 0.2, delays

    run(scenario, a_job("a"))


def test_the_list_is_paginated_and_a_410_between_pages_lists_again_from_the_top(monkeypatch):
    monkeypatch.setattr(NamespaceJobWatcher, "list_page_size", 2)

    async def scenario(cluster, watcher):
        cluster.expire_next_continue_token = True
        watcher.subscribe("j0")
        await until(watcher.synced.is_set)
        assert [call["token"] for call in cluster.lists] == [None, "2", None, "2", "4"]
        assert {call["limit"] for call in cluster.lists} == {2}
        assert all(watcher.job(f"j{i}") for i in range(5))
        assert "410" in watcher.last_failure

    run(scenario, *(a_job(f"j{i}") for i in range(5)))


def test_managed_fields_are_never_kept():
    async def scenario(cluster, watcher):
        watcher.subscribe("a")
        await until(watcher.synced.is_set)
        await until(lambda: cluster._stream)
        assert "managedFields" not in watcher.job("a")["metadata"]  # from the LIST
        cluster.put(a_job("b"))
        await until(lambda: watcher.job("b"))
        assert "managedFields" not in watcher.job("b")["metadata"]  # from the watch
        fetched = await watcher.fetch("a")
        assert fetched["metadata"]["name"] == "a"
        assert "managedFields" not in fetched["metadata"]  # from a direct read

    run(scenario, a_job("a"))


def test_the_label_selector_narrows_both_list_and_watch():
    selector = "app.kubernetes.io/managed-by=airflow-volcano-wandb"

    async def scenario(cluster, watcher):
        watcher.subscribe("a")
        await until(lambda: cluster._stream)
        assert [call["selector"] for call in cluster.lists] == [selector]
        assert [call["selector"] for call in cluster.watches] == [selector]

    run(scenario, a_job("a"), label_selector=selector)


def test_watchers_are_shared_per_connection_namespace_and_selector():
    async def main():
        def hook():
            raise AssertionError("not started")

        one = job_watcher.shared_watcher("conn", NS, hook, "x=1")
        assert job_watcher.shared_watcher("conn", NS, hook, "x=1") is one
        assert job_watcher.shared_watcher("conn", NS, hook) is not one
        assert job_watcher.shared_watcher("conn", NS, hook, "x=2") is not one
        namespace_watch._watches.clear()

    asyncio.run(main())


def test_a_relist_wakes_only_the_waiters_of_jobs_whose_resource_version_moved():
    async def main():
        cluster = FakeCluster(a_job("same"), a_job("moved"))
        watcher = NamespaceJobWatcher(cluster.hook, NS)
        same, moved = watcher.subscribe("same"), watcher.subscribe("moved")
        await watcher.stop()  # drive the LIST by hand, without the watch's health changes
        hook = cluster.hook()
        async with hook.get_conn() as client:
            await watcher._list_all(hook, client)
            same.changed.clear(), moved.changed.clear()
            cluster.jobs["moved"]["metadata"]["resourceVersion"] = "2"
            await watcher._list_all(hook, client)
        assert moved.changed.is_set()
        assert not same.changed.is_set()

    asyncio.run(main())


def test_an_unreadable_kubeconfig_is_retried_until_it_is_there():
    cluster = FakeCluster(a_job("a"))
    attempts = []

    def hook_factory() -> FakeHook:
        attempts.append(1)
        if len(attempts) <= 2:
            raise ConfigException("Invalid kube-config file. No configuration found.")
        return cluster.hook()

    async def main():
        watcher = NamespaceJobWatcher(hook_factory, NS)
        watcher.subscribe("a")
        try:
            await until(lambda: watcher.failing_since is not None)
            assert "Could not load the Kubernetes configuration" in watcher.last_failure
            await until(watcher.synced.is_set)
        finally:
            await watcher.stop()

    asyncio.run(main())
    assert len(attempts) == 3


@pytest.mark.parametrize(
    ("exc", "says"),
    [
        (api_error(401), "refused this connection's credentials (HTTP 401)"),
        (api_error(403), "Kubernetes denied 'watch' on 'jobs.batch.volcano.sh'"),
        (api_error(404), "Volcano Job CRD (jobs.batch.volcano.sh, v1alpha1) is not served"),
        (api_error(429), "throttled"),
        (api_error(503), "HTTP 503: said the apiserver"),
        (TimeoutError(), "did not answer"),
        (ConnectionRefusedError("refused"), "Could not reach the Kubernetes API"),
        (FileNotFoundError("/etc/kube/config"), "Could not load the Kubernetes configuration"),
    ],
)
def test_each_failure_is_described_for_a_human(exc, says):
    message = describe_failure(exc, "watch", NS)
    assert says in message
    assert f"'{NS}'" in message


def test_fetch_reads_over_the_watch_client_and_retries_a_blip():
    async def scenario(cluster, watcher):
        watcher.subscribe("a")
        await until(lambda: cluster._stream)
        cluster.read_failures = [api_error(503), ConnectionResetError("reset")]
        assert (await watcher.fetch("a"))["metadata"]["name"] == "a"
        assert cluster.reads == [cluster.hooks[0].clients[0]] * 3  # no client of its own
        assert await watcher.fetch("gone") is None

    run(scenario, a_job("a"))


def test_fetch_without_a_watch_opens_a_client_for_the_read():
    async def scenario(cluster, watcher):
        assert (await watcher.fetch("a"))["metadata"]["name"] == "a"
        assert len(cluster.hooks) == 1 and cluster.hooks[0].clients[0].closed

    run(scenario, a_job("a"))


def test_fetch_raises_a_refusal_at_once_and_a_lasting_outage_after_its_budget(monkeypatch):
    monkeypatch.setattr(job_watcher, "FETCH_RETRY_BUDGET", 0.05)

    async def scenario(cluster, watcher):
        cluster.read_failures = [api_error(403)]
        with pytest.raises(KubernetesPermissionError, match="denied 'get'"):
            await watcher.fetch("a")
        assert len(cluster.reads) == 1
        cluster.read_failures = [api_error(503)] * 1000
        with pytest.raises(ApiException) as raised:
            await watcher.fetch("a")
        assert raised.value.status == 503
        assert 2 < len(cluster.reads) < 1000

    run(scenario, a_job("a"))


def test_the_heap_is_given_back_after_each_list_and_once_the_watch_is_stable(monkeypatch):
    monkeypatch.setattr(namespace_watch, "STABLE_WATCH_SECONDS", 0.05)
    released = []
    monkeypatch.setattr(namespace_watch.heap, "release_free_memory", lambda: released.append(1))

    async def scenario(cluster, watcher):
        watcher.subscribe("a")
        await until(watcher.synced.is_set)
        assert len(released) == 1  # the LIST's pages
        await until(lambda: len(released) == 2)  # the first looks after it

    run(scenario, a_job("a"))


def test_while_the_watch_is_failing_a_fetch_makes_one_attempt():
    # In an apiserver outage a thousand waiters each read their job once per poll_interval;
    # retrying each read within FETCH_RETRY_BUDGET made about five attempts of every one.
    async def scenario(cluster, watcher):
        watcher.subscribe("a")
        await until(lambda: cluster._stream)
        cluster.list_failures = [ConnectionRefusedError("refused")] * 1000
        cluster.break_watch(ConnectionResetError("reset by peer"))
        await until(lambda: watcher.failing_since is not None)
        cluster.read_failures = [ConnectionRefusedError("refused")] * 3
        with pytest.raises(ConnectionRefusedError):
            await watcher.fetch("a")
        assert len(cluster.reads) == 1

    run(scenario, a_job("a"))

"""NamespaceJobWatcher's reconnects: a new hook each time, backoffs, Retry-After, refusals and
unreadable kubeconfigs, each failure described for a human."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio.config.config_exception import ConfigException

from airflow_volcano_wandb.hooks.kubernetes_api import describe_failure
from airflow_volcano_wandb.wait import namespace_watch
from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher
from test_support.fake_apiserver import (
    NS,
    FakeCluster,
    FakeHook,
    a_job,
    api_error,
    record_delays,
    run,
    until,
)

pytestmark = pytest.mark.usefixtures("fast")  # backoffs of milliseconds (conftest)


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

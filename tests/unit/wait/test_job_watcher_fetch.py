"""NamespaceJobWatcher.fetch: one job read over the watch's client, or a client of its own,
retried within its budget."""

from __future__ import annotations

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from airflow_volcano_wandb.hooks.kubernetes_api import KubernetesPermissionError
from airflow_volcano_wandb.wait import job_watcher
from test_support.fake_apiserver import a_job, api_error, run, until

pytestmark = pytest.mark.usefixtures("fast")  # backoffs of milliseconds (conftest)


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

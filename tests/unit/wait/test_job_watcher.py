"""NamespaceJobWatcher against a scripted stand-in for the apiserver (no cluster, no sleeps).

``FakeCluster`` plays the apiserver: it holds jobs, pages LISTs, streams watch events, and
fails the next calls as a test scripts it. Each reconnect of the watcher asks for a new
``FakeHook``, so the tests can see that credentials would be loaded again.
"""

from __future__ import annotations

import asyncio

import pytest

from airflow_volcano_wandb.wait import job_watcher, namespace_watch
from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher
from test_support.fake_apiserver import NS, FakeCluster, a_job, api_error, run, until

pytestmark = pytest.mark.usefixtures("fast")  # backoffs of milliseconds (conftest)


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

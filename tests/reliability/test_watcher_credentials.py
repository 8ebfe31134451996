"""Credentials rotated under a running watch, on the shared local cluster.

The connection's kubeconfig first holds a token the apiserver does not know: the shared
watcher keeps failing with a message saying the credentials were refused (HTTP 401) and
never claims to be synced. The file is then replaced on disk by the cluster's admin
kubeconfig, as a secret rotation or a renewed token would do; the watcher loads it again on
its next reconnect (a fresh hook and client each time), recovers, and delivers a change to
a job.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from airflow_volcano_wandb.wait import job_watcher, namespace_watch
from test_support.cluster_jobs import submit_job
from test_support.operator_tries import GROUP, VERSION, kubernetes_conn_env

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]


def _with_bad_token(admin_kubeconfig: Path, out: Path) -> Path:
    config = yaml.safe_load(admin_kubeconfig.read_text())
    for user in config["users"]:
        user["user"] = {"token": "not-a-token-this-apiserver-issued"}
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


async def _until(predicate: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.2)


def test_a_replaced_kubeconfig_is_picked_up_and_the_watch_recovers(
    admin, volcano_cluster, volcano_namespace, monkeypatch, tmp_path
):
    monkeypatch.setattr(namespace_watch, "RECONNECT_BACKOFF_MAX", 1.0)  # recover within seconds
    namespace = volcano_namespace
    job = submit_job(admin, namespace, "rotated", master_seconds=600)
    kubeconfig = _with_bad_token(volcano_cluster.kubeconfig, tmp_path / "rotating.kubeconfig")
    monkeypatch.setenv("AIRFLOW_CONN_KUBERNETES_DEFAULT", kubernetes_conn_env(kubeconfig))

    def touch_the_job() -> None:
        client.CustomObjectsApi(admin).patch_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            "jobs",
            "rotated",
            {"metadata": {"annotations": {"test/touched": "yes"}}},
        )

    async def main() -> None:
        watcher = job_watcher.NamespaceJobWatcher(
            lambda: AsyncVolcanoHook(conn_id="kubernetes_default"), namespace
        )
        subscription = watcher.subscribe("rotated")
        try:
            await _until(lambda: watcher.failing_since is not None, 30, "a failure")
            await asyncio.sleep(3)  # several retries, all refused
            assert "refused this connection's credentials (HTTP 401)" in watcher.last_failure
            assert not watcher.synced.is_set()
            assert watcher.job("rotated") is None
            refused_connects = watcher.connects

            kubeconfig.write_text(volcano_cluster.kubeconfig.read_text())  # rotated on disk
            await _until(watcher.synced.is_set, 30, "the watch to recover")
            assert watcher.connects > refused_connects
            assert watcher.job("rotated")["metadata"]["uid"] == job["metadata"]["uid"]

            subscription.changed.clear()
            await asyncio.to_thread(touch_the_job)
            await _until(
                lambda: (
                    (watcher.job("rotated") or {})
                    .get("metadata", {})
                    .get("annotations", {})
                    .get("test/touched")
                ),
                30,
                "the watch to deliver the change",
            )
            assert subscription.changed.is_set()
        finally:
            await watcher.stop()

    asyncio.run(main())

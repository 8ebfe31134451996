"""The master-log follow in a task's own thread (a poking sensor) on the real cluster: it shows
the master's lines, and its stop() does not wait for the next one.

A follow stream returns only when a line arrives or the container ends. A task whose wait is
over must wait for neither: ``stop()`` cancels the follow's blocked read at once.
"""

from __future__ import annotations

import threading

import pytest

from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from airflow_volcano_wandb.logs.master_log import MasterLogThread
from test_support.cluster_jobs import submit_job, wait_until
from test_support.line_log import LineLog

pytestmark = pytest.mark.cluster


def test_stop_ends_a_silent_follow_without_waiting_for_a_line(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    api = volcano_cluster.api_client()
    submit_job(api, volcano_namespace, "followed", master_seconds=600)
    log = LineLog()
    follower = MasterLogThread(
        AsyncVolcanoHook, "followed", volcano_namespace, log, max_lines=100, max_bytes=100_000
    )
    follower.start()
    # The simulated container prints its start lines, then nothing for ten minutes.
    wait_until(lambda: any("running for 600s" in line for line in log.lines), 90, what="log")
    assert any(line.startswith("[followed-master-0] ") for line in log.lines), log.lines

    stopper = threading.Thread(target=follower.stop)
    stopper.start()
    stopper.join(timeout=15)  # a silent stream would hold its read for a minute or more
    assert not stopper.is_alive(), "stop() waited for the next log line"
    assert not follower.is_alive()
    api.close()

"""The sync wait's master-log follower on the real cluster: its stop() must not wait.

A follow stream returns only when a line arrives or the container ends. A task whose job has
ended must not wait for either: ``stop()`` wakes the follower's blocked read at once.
"""

from __future__ import annotations

import threading

import pytest

from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.logs.log_follower import MasterLogFollower
from tests.integration.jobs import submit_job, wait_until
from tests.line_log import LineLog

pytestmark = pytest.mark.cluster


def test_stop_ends_a_silent_follow_without_waiting_for_a_line(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    api = volcano_cluster.api_client()
    submit_job(api, volcano_namespace, "followed", master_seconds=600)
    log = LineLog()
    follower = MasterLogFollower(VolcanoHook(), "followed", volcano_namespace, "master", log)
    follower.start()
    # The simulated container prints its start lines, then nothing for ten minutes.
    wait_until(lambda: any("running for 600s" in line for line in log.lines), 90, what="log")

    stopper = threading.Thread(target=follower.stop)
    stopper.start()
    stopper.join(timeout=15)  # a silent stream would hold close() for a minute or more
    assert not stopper.is_alive(), "stop() waited for the next log line"
    assert not follower.is_alive()
    api.close()

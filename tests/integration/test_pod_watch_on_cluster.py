"""The shared pod watch on the real cluster: running jobs' pod checks cost no per-job LIST.

Counted where it matters, at the apiserver (its ``apiserver_request_total``), while triggers
with the operator's default pod checks (a restart budget, a startup budget) wait on running
jobs, once with the pod watch (the default) and once without (``[volcano_wandb] pod_watch``
off: one LIST per job per ``pod_check_interval``, as before the watch). The verdicts the pods
give through the watch (a crash loop, a stop from W&B, a container that cannot start) are the
operator's tests in test_crash_loop_on_cluster.py, test_stop_from_wandb_on_cluster.py and
test_startup_budget_on_cluster.py, which run with the pod watch on (the default).
"""

from __future__ import annotations

import asyncio
import re

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.job.ownership import MANAGED_BY, MANAGED_BY_LABEL
from airflow_volcano_wandb.logs import log_client
from airflow_volcano_wandb.wait import job_watcher, namespace_watch
from airflow_volcano_wandb.wait.pod_watcher import NamespacePodWatcher
from test_support.cluster_jobs import list_pods, submit_job, wait_until
from test_support.operator_tries import first_event, trigger_of

pytestmark = pytest.mark.cluster

MANAGED = {MANAGED_BY_LABEL: MANAGED_BY}
JOBS = 4
WINDOW_S = 6.0


def pod_requests(api: k8s.ApiClient) -> dict[str, float]:
    """The apiserver's count of requests on pods so far, by verb."""
    response = api.call_api(
        "/metrics", "GET", auth_settings=["BearerToken"], _preload_content=False
    )
    if isinstance(response, tuple):  # older clients answer (data, status, headers)
        response = response[0]
    counts: dict[str, float] = {}
    for line in response.data.decode().splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', line))
        if labels.get("resource") == "pods" and not labels.get("subresource"):
            verb = labels["verb"]
            counts[verb] = counts.get(verb, 0.0) + float(line.rsplit(" ", 1)[1])
    return counts


def waits_on_running_jobs(api, namespace, jobs, pod_watch: bool, monkeypatch) -> dict:
    """LISTs of pods the apiserver served while ``JOBS`` triggers waited ``WINDOW_S``."""
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__POD_WATCH", str(pod_watch))

    async def main():
        options = {"max_container_restarts": 3, "startup_timeout": 120, "follow_master_log": True}
        # A look every second, and pods due at every other look.
        triggers = [trigger_of(job, namespace, poll_interval=1, **options) for job in jobs]

        tasks = [asyncio.create_task(first_event(t)) for t in triggers]
        await asyncio.sleep(3)  # each trigger's first look, and the watches' first LISTs
        before = pod_requests(api)
        pod_watches = []
        for _ in range(int(WINDOW_S / 0.5)):
            pod_watches.append(namespace_watch.active_watches(NamespacePodWatcher))
            await asyncio.sleep(0.5)
        after = pod_requests(api)
        clients = log_client.open_log_clients()
        assert not any(t.done() for t in tasks), [t.result() for t in tasks if t.done()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return {
            "lists": after.get("LIST", 0) - before.get("LIST", 0),
            "pod_watches": max(pod_watches),
            "log_clients": clients,
        }

    return asyncio.run(main())


def test_pod_checks_of_running_jobs_read_one_shared_watch_not_a_list_per_job(cluster, monkeypatch):
    api, namespace = cluster
    jobs = [
        submit_job(api, namespace, f"podwatch-{i}", 600, labels=MANAGED, pod_labels=MANAGED)
        for i in range(JOBS)
    ]
    wait_until(
        lambda: sum(p.status.phase == "Running" for p in list_pods(api, namespace)) >= 2 * JOBS,
        timeout=120,
        what="every job's pods Running",
    )
    # pod_check_interval is 2 s here (the cluster fixture): each job's pods are looked at
    # every 2 s; without the watch each look is a LIST.
    watched = waits_on_running_jobs(api, namespace, jobs, True, monkeypatch)
    listed = waits_on_running_jobs(api, namespace, jobs, False, monkeypatch)

    assert watched["pod_watches"] == 1  # one for the namespace, whatever the number of jobs
    # None per job: at most a relist of the watch itself (a 410) or another client's LIST.
    assert watched["lists"] <= 2, watched
    assert listed["pod_watches"] == 0
    assert listed["lists"] >= JOBS * 2, listed  # each job's own LISTs, as before the watch
    assert watched["log_clients"] == 1  # four master-log follows over one client
    assert namespace_watch.active_watches() == 0  # the last wait out closed both watches
    assert job_watcher.active_watchers() == 0

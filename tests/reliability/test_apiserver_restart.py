"""The kube-apiserver is stopped and started again while 20 deferred tasks' triggers wait.

A private cluster (its apiserver is taken away, so the shared one is left alone). Twenty task
instances are submitted through ``VolcanoPyTorchJobOperator.execute`` (deferrable), and the
twenty ``VolcanoJobTrigger``s they deferred with run in one event loop, as in a triggerer,
sharing one watch. While they wait the apiserver is stopped for 15 s and started again with
the same command line (same etcd); three jobs are deleted the moment it is back, before the
watch has reconnected. Every trigger must fire exactly once with the job's real outcome,
and no job may be duplicated.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest
from kubernetes import client, config

from airflow_volcano_wandb.job.ownership import IDENTITY_LABEL
from airflow_volcano_wandb.wait import job_watcher
from test_support import faults
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, failing_template, seed_template

pytestmark = [pytest.mark.cluster, pytest.mark.long, pytest.mark.timeout(600)]

OUTAGE_SECONDS = 15
# run index -> (kind, expected trigger status)
PLAN = (
    [("quick", "succeeded")] * 2  # finish before the outage
    + [("slow", "succeeded")] * 10  # finish during or after it
    + [("fail", "failed")] * 5  # the master exits 3; PodFailed -> TerminateJob
    + [("deleted", "deleted")] * 3  # deleted by someone while the watch is down
)


def _template(kind: str) -> dict:
    if kind == "quick":
        return seed_template(master={SIM_DURATION: "2"}, worker={SIM_DURATION: "600"})
    if kind == "slow":
        return seed_template(master={SIM_DURATION: "20"}, worker={SIM_DURATION: "600"})
    if kind == "fail":
        return failing_template("20")
    return seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})


def test_twenty_triggers_survive_an_apiserver_restart_with_a_stub_ti(monkeypatch, wandb_connection):
    with support.private_cluster() as info:
        monkeypatch.setenv(
            "AIRFLOW_CONN_KUBERNETES_DEFAULT", support.kubernetes_conn_env(info.kubeconfig)
        )
        namespace = support.create_namespace(info.kubeconfig, "restart")
        api = config.new_client_from_config(config_file=str(info.kubeconfig))

        triggers, tis = [], []
        for index, (kind, _) in enumerate(PLAN):
            ti = support.StubTaskInstance("avw_rel_restart", "train", f"run-{index:02d}")
            op = support.operator(template=_template(kind), namespace=namespace, deferrable=True)
            triggers.append(support.execute_operator(op, ti))
            tis.append(ti)
        submitted = {ti.pushed["volcano_job"]["uid"] for ti in tis}
        assert len(submitted) == len(PLAN)

        timeline: dict[str, float] = {}

        async def faults_script() -> None:
            t0 = time.monotonic()
            # Let the quick jobs finish and the others start running.
            await asyncio.sleep(10)
            argv = await asyncio.to_thread(faults.stop_component, info.state_dir, "kube-apiserver")
            timeline["stopped"] = time.monotonic() - t0
            await asyncio.sleep(OUTAGE_SECONDS)
            await asyncio.to_thread(faults.start_component, info.state_dir, "kube-apiserver", argv)
            await asyncio.to_thread(faults.wait_apiserver_ready, info.state_dir, 90)
            timeline["ready"] = time.monotonic() - t0
            custom = client.CustomObjectsApi(api)
            for index, (kind, _) in enumerate(PLAN):
                if kind == "deleted":
                    name = tis[index].pushed["volcano_job"]["name"]
                    await asyncio.to_thread(
                        custom.delete_namespaced_custom_object,
                        support.GROUP,
                        support.VERSION,
                        namespace,
                        "jobs",
                        name,
                    )
            timeline["deleted"] = time.monotonic() - t0

        async def main():
            watchers_seen = []

            async def count_watchers():
                while True:
                    watchers_seen.append(job_watcher.active_watchers())
                    await asyncio.sleep(1)

            counter = asyncio.create_task(count_watchers())
            results = await asyncio.gather(
                faults_script(),
                *(support.collect_events(t, timeout=300) for t in triggers),
                return_exceptions=True,
            )
            counter.cancel()
            return results[0], results[1:], watchers_seen

        script_error, results, watchers_seen = asyncio.run(main())
        assert script_error is None, script_error
        assert timeline["stopped"] < timeline["ready"]

        errors = [r for r in results if isinstance(r, BaseException)]
        assert not errors, errors
        for index, ((kind, expected), events) in enumerate(zip(PLAN, results, strict=True)):
            assert len(events) == 1, (index, kind, events)  # fired exactly once
            event = events[0]
            assert event["outcome"] == expected, (index, kind, event)
            assert event["job_uid"] == tis[index].pushed["volcano_job"]["uid"]
            if expected == "failed":
                assert event["phase"] in ("Terminated", "Failed", "Aborted"), event
        # One watch connection for the namespace at any time, however many triggers.
        assert max(watchers_seen) == 1, watchers_seen

        # Nothing duplicated: every job on the cluster is one we submitted, one per task
        # instance; the deleted ones are gone.
        jobs = support.list_jobs(api, namespace)
        owners = Counter(job["metadata"]["labels"][IDENTITY_LABEL] for job in jobs)
        assert all(n == 1 for n in owners.values()), owners
        assert {job["metadata"]["uid"] for job in jobs} <= submitted
        assert len(jobs) == len(PLAN) - 3

        # A retry of every task instance now finds its job and does not submit another.
        for index, (kind, _) in enumerate(PLAN):
            if kind != "slow":
                continue
            ti = support.StubTaskInstance(
                "avw_rel_restart", "train", f"run-{index:02d}", try_number=2
            )
            op = support.operator(template=_template(kind), namespace=namespace, deferrable=True)
            result = support.execute_operator(op, ti)
            # Already Completed: success without resubmitting (and, delete_succeeded, deleted).
            assert result["uid"] == tis[index].pushed["volcano_job"]["uid"]
            assert result["phase"] == "Completed"

        # (Foreground deletion: the jobs go once their pods have.)
        def remaining_uids():
            uids = {job["metadata"]["uid"] for job in support.list_jobs(api, namespace)}
            return uids if len(uids) == len(PLAN) - 3 - 10 else None

        remaining = support.wait_until(remaining_uids, 60, what="the retried jobs to be deleted")
        assert remaining <= submitted
        api.close()

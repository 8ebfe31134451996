"""Volcano restarts a job: the wait reports ``Restarting`` with the retry count, then the end.

On the shared local cluster, two jobs submitted through the operator (deferrable) are waited
on by their triggers in one event loop:

- ``PodEvicted -> RestartJob``: the test deletes the running master pod (what an eviction
  does); Volcano restarts the whole job once, the master then completes: the trigger logs
  ``Restarting ... (retry N)`` and fires ``succeeded`` with ``retry_count >= 1``;
- ``PodFailed -> RestartJob`` with ``maxRetry: 2``: the master fails every time; Volcano
  restarts twice and then gives up: the trigger fires ``failed`` with Volcano's final phase
  and the retries in its message.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from kubernetes import client

from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, SIM_EXIT_CODE, seed_template

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _logged(trigger) -> Lines:
    handler = Lines()
    logger = logging.getLogger(f"avw.reliability.{trigger.job_name}")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    trigger._log = logger  # the trigger's progress lines (as the operator's sync wait does)
    return handler


def test_restarting_is_reported_with_its_retry_count_then_the_final_verdict_with_a_stub_ti(
    kubernetes_connection, wandb_connection, admin, volcano_namespace
):
    namespace = volcano_namespace
    core = client.CoreV1Api(admin)

    evicted = seed_template(master={SIM_DURATION: "12"}, worker={SIM_DURATION: "600"})
    evicted["spec"]["policies"] = [{"event": "PodEvicted", "action": "RestartJob"}]
    evicted["spec"]["maxRetry"] = 3

    crashing = seed_template(
        master={SIM_DURATION: "2", SIM_EXIT_CODE: "4"}, worker={SIM_DURATION: "600"}
    )
    for task in crashing["spec"]["tasks"]:
        task["template"]["spec"]["restartPolicy"] = "Never"
    crashing["spec"]["policies"] = [{"event": "PodFailed", "action": "RestartJob"}]
    crashing["spec"]["maxRetry"] = 2

    triggers = {}
    for key, template in (("evicted", evicted), ("crashing", crashing)):
        op = support.operator(template=template, namespace=namespace, deferrable=True)
        triggers[key] = support.execute_operator(
            op, support.StubTaskInstance("avw_rel_restarts", "train", key)
        )
    logs = {key: _logged(t) for key, t in triggers.items()}

    async def evict_master() -> None:
        name = triggers["evicted"].job_name
        while True:
            pods = await asyncio.to_thread(
                core.list_namespaced_pod, namespace, label_selector=f"volcano.sh/job-name={name}"
            )
            masters = [
                p
                for p in pods.items
                if p.metadata.name.endswith("-master-0") and p.status.phase == "Running"
            ]
            if masters:
                await asyncio.sleep(1)
                await asyncio.to_thread(
                    core.delete_namespaced_pod, masters[0].metadata.name, namespace
                )
                return
            await asyncio.sleep(0.5)

    async def main():
        return await asyncio.gather(
            evict_master(), *(support.collect_events(t, timeout=200) for t in triggers.values())
        )

    _, evicted_events, crashing_events = asyncio.run(main())

    assert len(evicted_events) == 1
    event = evicted_events[0]
    assert event["outcome"] == "succeeded" and event["phase"] == "Completed", event
    # At least one restart: under load, the restart's own pod deletions can count as a
    # second eviction before the new gang is up (Volcano's counting, not the provider's).
    assert event["retry_count"] >= 1, event
    assert any(line.startswith("Restarting") for line in logs["evicted"].lines), logs[
        "evicted"
    ].lines
    assert any("(retry " in line for line in logs["evicted"].lines)

    assert len(crashing_events) == 1
    event = crashing_events[0]
    assert event["outcome"] == "failed" and event["phase"] in ("Failed", "Aborted"), event
    assert event["retry_count"] == 2, event
    assert "after 2 restart(s)" in event["message"]
    assert any(line.startswith("Restarting") for line in logs["crashing"].lines)

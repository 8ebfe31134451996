"""The deferred trigger's opt-in master log follow, on the real cluster.

The cluster's simulated containers print their log through the ``podlogs`` component (see
``airflow_volcano_wandb.testing.cluster.podlogs``): numbered lines, a line written in two
halves a second apart, and start lines again after each container restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

import pytest
from kubernetes import client as k8s

from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from airflow_volcano_wandb.logs import master_log
from airflow_volcano_wandb.testing.cluster.podlogs import (
    LOG_LINES_ANNOTATION,
    PROGRESS_ANNOTATION,
    SPLIT_LINE_ANNOTATION,
)
from airflow_volcano_wandb.triggers import VolcanoJobTrigger
from airflow_volcano_wandb.wait.outcome import WaitResult
from test_support.cluster_jobs import SIM_DURATION, SIM_EXIT_CODE, submit_job
from test_support.line_log import LineLog

pytestmark = pytest.mark.cluster

SPLIT = "a line the container wrote in two halves ✓"


@pytest.fixture(autouse=True)
def quick_rechecks(monkeypatch):
    # The production 30 s between looks at a pod would make these tests slow, not different.
    monkeypatch.setattr(master_log, "RECHECK_SECONDS", 1.0)


@pytest.fixture
def opened(monkeypatch):
    """Every log stream the follow opens."""
    streams: list[str] = []
    original = AsyncVolcanoHook.open_pod_log

    async def recording(self, api, pod, namespace, container):
        streams.append(pod)
        return await original(self, api, pod, namespace, container)

    monkeypatch.setattr(AsyncVolcanoHook, "open_pod_log", recording)
    return streams


def _submit(api: k8s.ApiClient, namespace: str, name: str, **master: str) -> dict:
    seconds = int(master.pop(SIM_DURATION))
    return submit_job(api, namespace, name, seconds, master_annotations=master)


def _watch_until(trigger: VolcanoJobTrigger, log: LineLog, done, timeout: float = 120) -> dict:
    """Run the trigger until ``done(log)`` or its event; then cancel it, as the triggerer
    does with a trigger whose task was killed. Returns its event, if it fired."""

    async def main() -> dict:
        events: list[dict] = []

        async def run() -> None:
            async for event in trigger.run():
                events.append(event.payload)

        task = asyncio.create_task(run())
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while not task.done() and not done(log):
                    await asyncio.sleep(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # The follow ended with the trigger: no task of it is left behind.
        left = [t for t in asyncio.all_tasks() if t.get_name().startswith("volcano-master-log")]
        assert left == []
        return events[0] if events else {}

    trigger._log = log
    return asyncio.run(main())


def _trigger(job: dict, **kwargs) -> VolcanoJobTrigger:
    meta = job["metadata"]
    return VolcanoJobTrigger(
        job_name=meta["name"],
        namespace=meta["namespace"],
        job_uid=meta["uid"],
        poll_interval=1,
        delete_on_kill=False,
        **kwargs,
    )


def test_the_masters_lines_reach_the_trigger_log_whole_with_progress(
    kubernetes_connection, volcano_cluster, volcano_namespace, opened
):
    api = volcano_cluster.api_client()
    job = _submit(
        api,
        volcano_namespace,
        "live",
        **{SIM_DURATION: "600", LOG_LINES_ANNOTATION: "5", SPLIT_LINE_ANNOTATION: SPLIT},
    )
    pod = "live-master-0"
    log = LineLog()
    _watch_until(_trigger(job, follow_master_log=True), log, lambda log: SPLIT in log.of(pod))
    lines = log.of(pod)
    assert [line for line in lines if line.startswith("[sim] line ")] == [
        f"[sim] line {i} of 5" for i in range(1, 6)
    ]
    assert lines.count(SPLIT) == 1
    assert not any(SPLIT[:10] in line and line != SPLIT for line in lines)  # no half alone
    assert any(line.startswith("Running: master 1/1") for line in log.lines), log.lines
    assert opened == [pod]
    api.close()


def test_a_followed_records_metrics_fire_with_the_triggers_event(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    """A trainer without W&B whose record carries its loss (written in two halves, as a
    kubelet may serve a line): the trigger that followed the log fires with the loss kept at
    the record's step (``WaitResult.metrics``), what the finished wait pushes as the
    ``training_metrics`` XCom for the Training tab once the pods are gone."""
    api = volcano_cluster.api_client()
    record = 'AVW_PROGRESS {"step": 40, "total_steps": 80, "epoch": 1, "train/epoch_loss": 0.75}'
    job = _submit(
        api, volcano_namespace, "kept", **{SIM_DURATION: "4", SPLIT_LINE_ANNOTATION: record}
    )
    log = LineLog()
    event = _watch_until(_trigger(job, follow_master_log=True), log, lambda log: False)
    assert event["outcome"] == "succeeded", log.lines
    assert WaitResult.from_event(event).metrics == {"train/epoch_loss": [[40, 0.75]]}, log.lines
    api.close()


def test_the_cap_stops_the_follow_with_one_notice(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    api = volcano_cluster.api_client()
    job = _submit(
        api, volcano_namespace, "capped", **{SIM_DURATION: "600", LOG_LINES_ANNOTATION: "40"}
    )
    log = LineLog()
    trigger = _trigger(job, follow_master_log=True, master_log_max_lines=10)
    _watch_until(trigger, log, lambda log: any("capped at" in line for line in log.lines))
    lines = log.of("capped-master-0")
    assert len(lines) == 11
    assert lines[-1] == (
        f"... master log capped at 10 lines ({sum(len(line.encode()) for line in lines[:10])} "
        "bytes); the full log is in the pod"
    )
    api.close()


def test_a_restarted_master_is_followed_again_without_repeated_lines(
    kubernetes_connection, volcano_cluster, volcano_namespace, opened
):
    api = volcano_cluster.api_client()
    # The seed's restartPolicy OnFailure restarts the failing container in place, every 3 s.
    job = _submit(api, volcano_namespace, "restarts", **{SIM_DURATION: "3", SIM_EXIT_CODE: "1"})
    pod = "restarts-master-0"
    log = LineLog()

    def restarted_twice(log: LineLog) -> bool:
        again = [line for line in log.lines if line.startswith(f"Following the log of {pod}")]
        return len(again) >= 2

    event = _watch_until(_trigger(job, follow_master_log=True), log, restarted_twice)
    assert event == {}, "the job should still be running"
    shown = log.of(pod)
    # What the pod's log holds, read once at the end: the follow showed a prefix of it, in
    # order, each line once, though every reopened stream replayed it from the start.
    raw = k8s.CoreV1Api(api).read_namespaced_pod_log(pod, volcano_namespace, _preload_content=False)
    actual = raw.data.decode().splitlines()
    assert shown == actual[: len(shown)]
    assert any("restarted (restart 2)" in line for line in shown), shown
    assert len(opened) >= 3
    api.close()


def test_without_follow_master_log_no_log_stream_is_opened(
    kubernetes_connection, volcano_cluster, volcano_namespace, opened
):
    api = volcano_cluster.api_client()
    job = _submit(api, volcano_namespace, "quiet", **{SIM_DURATION: "3", LOG_LINES_ANNOTATION: "5"})
    log = LineLog()
    event = _watch_until(_trigger(job), log, lambda log: False)
    assert event["outcome"] == "succeeded"
    assert opened == []
    assert log.of("quiet-master-0") == []
    assert any("master 1/1" in line for line in log.lines), log.lines  # progress stays on
    api.close()


def test_progress_records_in_the_followed_log_give_the_progress_lines(
    kubernetes_connection, volcano_cluster, volcano_namespace
):
    """A trainer without W&B prints ``AVW_PROGRESS`` records (one a second for 12 s here, a
    tenth of its steps or more in each): the trigger following its log logs progress lines,
    rising, with a rate and an ETA."""
    api = volcano_cluster.api_client()
    annotations = {SIM_DURATION: "12", PROGRESS_ANNOTATION: "400"}
    job = _submit(api, volcano_namespace, "records", **annotations)
    log = LineLog()
    event = _watch_until(_trigger(job, follow_master_log=True), log, lambda log: False)
    assert event["outcome"] == "succeeded"
    line = re.compile(r"^progress: step \d+/400 \((\d+) %\)(, [\d.]+ steps/s, ETA \d+ s)?$")
    shown = [match for text in log.lines if (match := line.match(text))]
    percents = [int(match[1]) for match in shown]
    assert len(shown) >= 2 and percents == sorted(percents), log.lines
    assert percents[0] < percents[-1] and any(match[2] for match in shown), log.lines
    api.close()

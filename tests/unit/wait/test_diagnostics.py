"""Failure and pending explanations from pods, PodGroups and events (pure)."""

from __future__ import annotations

from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.wait import diagnostics


def pod(name, task, *, exit_code=None, waiting=None, phase="Running", reason=None):
    state = {}
    if exit_code is not None:
        state = {"terminated": {"exitCode": exit_code, "reason": "Error"}}
    if waiting:
        state = {"waiting": {"reason": waiting, "message": "back-off pulling image"}}
    status = {"phase": phase, "containerStatuses": [{"name": task, "state": state}]}
    if reason:
        status["reason"] = reason
    return {"metadata": {"name": name, "labels": {"volcano.sh/task-spec": task}}, "status": status}


def test_failures_name_task_pod_container_and_exit_code_masters_first():
    failures = diagnostics.container_failures(
        [
            pod("j-worker-0", "worker", exit_code=3),
            pod("j-master-0", "master", exit_code=1),
            pod("j-worker-1", "worker", exit_code=0),
        ],
        master_task="master",
    )
    assert [f.pod for f in failures] == ["j-master-0", "j-worker-0"]
    assert failures[1].describe() == (
        "task worker pod j-worker-0 container worker exited with code 3 (Error)"
    )


def test_stuck_image_pulls_are_reported_while_pending():
    (failure,) = diagnostics.container_failures(
        [pod("j-master-0", "master", waiting="ImagePullBackOff")]
    )
    assert "is waiting: ImagePullBackOff" in failure.describe()


def test_evicted_pods_report_the_pod_reason():
    (failure,) = diagnostics.container_failures(
        [pod("j-worker-0", "worker", phase="Failed", reason="Evicted")]
    )
    assert failure.reason == "Evicted"


def test_unschedulable_reason_joins_scheduler_and_podgroup_words():
    podgroups = [
        {
            "status": {
                "conditions": [
                    {
                        "type": "Unschedulable",
                        "status": "True",
                        "message": "10/10 tasks in gang unschedulable: pod group is not ready",
                    }
                ]
            }
        }
    ]
    events = [
        {
            "type": "Warning",
            "reason": "Unschedulable",
            "lastTimestamp": "2026-01-01T00:00:01Z",
            "message": "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
        },
        {
            "type": "Normal",
            "reason": "Scheduled",
            "lastTimestamp": "2026-01-01T00:00:00Z",
            "message": "ok",
        },
    ]
    assert diagnostics.unschedulable_reason(podgroups, events) == (
        "0/4 nodes are available: 4 Insufficient nvidia.com/gpu; "
        "10/10 tasks in gang unschedulable: pod group is not ready"
    )


def test_no_reason_is_an_empty_string_not_a_guess():
    assert diagnostics.unschedulable_reason([], []) == ""


def test_warning_events_are_deduplicated_and_ordered_oldest_first():
    events = [
        {
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "a",
            "lastTimestamp": "2026-01-01T00:00:02Z",
            "involvedObject": {"kind": "Pod", "name": "p"},
        },
        {
            "type": "Warning",
            "reason": "FailedScheduling",
            "message": "a",
            "lastTimestamp": "2026-01-01T00:00:01Z",
            "involvedObject": {"kind": "Pod", "name": "p"},
        },
        {
            "type": "Warning",
            "reason": "PodFailed",
            "message": "b",
            "lastTimestamp": "2026-01-01T00:00:03Z",
            "involvedObject": {"kind": "Job", "name": "j"},
        },
    ]
    assert diagnostics.warning_events(events) == ["Pod/p FailedScheduling: a", "Job/j PodFailed: b"]


def test_tail_keeps_the_last_lines():
    assert diagnostics.tail("1\n2\n3\n", 2) == "2\n3"


def test_the_master_is_the_plugins_master_task_not_a_task_named_master():
    job = {
        "spec": {
            "plugins": {"pytorch": ["--master=chief", "--worker=worker"]},
            "tasks": [{"name": "worker"}, {"name": "chief"}, {"name": "master"}],
        }
    }
    pods = [pod("j-master-0", "master"), pod("j-chief-0", "chief"), pod("j-worker-0", "worker")]
    assert diagnostics.master_pod(pods, job)["metadata"]["name"] == "j-chief-0"
    assert diagnostics.master_pod(pods[2:], job) is None
    failures = diagnostics.container_failures(
        [pod("j-master-0", "master", exit_code=1), pod("j-chief-0", "chief", exit_code=2)],
        master_task="chief",
    )
    assert [f.pod for f in failures] == ["j-chief-0", "j-master-0"]


def test_a_failure_report_shows_failures_then_logs_then_warnings():
    failures = diagnostics.container_failures([pod("j-worker-0", "worker", exit_code=3)])
    master = pod("j-master-0", "master")
    assert diagnostics.pods_worth_a_log(failures, master) == ["j-worker-0", "j-master-0"]
    events = [
        {
            "type": "Warning",
            "reason": "BackOff",
            "message": "restarting",
            "involvedObject": {"kind": "Pod", "name": "j-worker-0"},
        }
    ]
    report = diagnostics.failure_report(
        failures, {"j-worker-0": "a\nb\nc\n", "j-master-0": ""}, events, log_lines=2
    )
    assert report == [
        "task worker pod j-worker-0 container worker exited with code 3 (Error)",
        "last 2 log lines of j-worker-0:",
        "    b",
        "    c",
        "warning events:",
        "    Pod/j-worker-0 BackOff: restarting",
    ]


def _job(name="j", **replicas):
    tasks = [
        {"name": t, "replicas": n} for t, n in (replicas or {"master": 1, "worker": 2}).items()
    ]
    return {"metadata": {"name": name}, "spec": {"tasks": tasks}}


def _oom(name, task):
    p = pod(name, task, phase="Failed")
    p["status"]["containerStatuses"][0]["state"] = {
        "terminated": {"exitCode": 137, "reason": "OOMKilled"}
    }
    return p


def test_classify_names_the_most_specific_cause():
    classify = diagnostics.classify
    assert classify(_job(), [pod("j-master-0", "master", exit_code=2)], []).kind is Ending.EXIT_CODE
    oom = classify(
        _job(), [pod("j-master-0", "master", exit_code=1), _oom("j-worker-1", "worker")], []
    )
    assert (oom.kind, oom.failure.pod, oom.failure.exit_code) == (
        Ending.OOM_KILLED,
        "j-worker-1",
        137,
    )
    # An evicted pod's containers die with 137 too: the eviction is the cause.
    evicted = pod("j-worker-0", "worker", phase="Failed", reason="Evicted", exit_code=137)
    found = classify(_job(), [evicted], [])
    assert (found.kind, found.failure.task) == (Ending.PREEMPTED, "worker")
    assert "was stopped: Evicted" in found.failure.describe()
    assert classify(_job(), [], []).kind is Ending.FAILED


def test_classify_finds_a_preemption_of_a_pod_that_is_gone_by_its_event():
    event = {
        "type": "Warning",
        "reason": "Evict",
        "message": "Pod is evicted, because of preempt",
        "involvedObject": {"kind": "Pod", "name": "j-worker-1"},
    }
    assert "j-worker-1" in diagnostics.pod_names(_job())
    found = diagnostics.classify(_job(), [pod("j-master-0", "master", exit_code=1)], [event])
    assert found.kind is Ending.PREEMPTED
    assert (found.failure.pod, found.failure.task) == ("j-worker-1", "worker")


def test_classify_tells_an_image_pull_from_a_gang_that_does_not_fit():
    stuck = [pod("j-master-0", "master", waiting="ErrImagePull", phase="Pending")]
    assert diagnostics.classify(_job(), stuck, [], never_started=True).kind is Ending.IMAGE_PULL
    assert diagnostics.classify(_job(), [], [], never_started=True).kind is Ending.PENDING_TIMEOUT

"""Tasks through the reliability stack's real schedulers and triggerers, and what each cost
(``e2e_real_airflow``, issues 26 and 42; the CI trial of short jobs).

Tasks of the provider's operator (``tests/reliability/dags/avw_reliability_dags.py``), of
``KubernetesPodOperator(deferrable=True)`` (``avw_kpo_dags.py``) and of Airflow's own deferral
resumed on a worker (``avw_floor_dags.py``, the floor), each with its job or pod in a namespace
of its own, run at most ``in_flight`` at once (:func:`run_plan`). :class:`DoneSeen`
watches every Volcano job and pod, so each task's row (:func:`ended_row`) counts from the
moment its job was seen ``Completed`` (the provider) or its pod ended (KPO) to the task's
``end_date`` in Airflow (the same machine clock); the floor's from its trigger's fire, its
moment. A task resumed after a deferral also gets the steps from its trigger's fire
(``STEPS``); ``e2e_figures`` sums the rows up.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client, watch

from airflow_volcano_wandb.job.ownership import REPORTED_ANNOTATION
from airflow_volcano_wandb.parts.job_wait import DEFAULT_DEFER_AFTER
from airflow_volcano_wandb.triggers.volcano import DEFAULT_DEFER_SETTLE_SECONDS
from test_support.airflow_runs import ENDED, Run, Watched
from test_support.cluster_jobs import SIM_DURATION, seed_template
from tests.e2e.airflow_stack import AirflowStack, ApiError, wait_for

#: The stack leaves ``[volcano_wandb]`` at its defaults: what users run.
DEFER_AFTER = DEFAULT_DEFER_AFTER
SETTLE_S = DEFAULT_DEFER_SETTLE_SECONDS
#: How long each kind's job (its master and worker) or pod runs, in seconds.
KINDS = {
    "ends_at_once": 1.0,  # inside the first window: the task never defers
    "ends_after_deferral": DEFER_AFTER + 5,  # just after the deferral, inside the settle
    "ends_after_settle": DEFER_AFTER + SETTLE_S + 15,  # long after both
}
#: Each family's DAG: the operator at its defaults, the operator deferring at once (no first
#: window: a short job then meets the settle, through the triggerers), KPO, and the floor.
DAGS = {
    "provider": "avw_rel_deferred",
    "provider_defer_at_once": "avw_rel_defer_at_once",
    "kpo": "avw_kpo_deferred",
    "floor": "avw_floor_resume",
}
#: The steps from the trigger's fire to the end of a task resumed on a worker: the task
#: instance's timestamps (``scheduled_when`` is set as the triggerer writes the event) and
#: the lines of the resumed process's task log. ``done`` to ``fired`` is the trigger's
#: detection, with the provider's settle.
STEPS = (
    ("done", "fired", "done_to_fired_s"),  # the trigger saw it (and waited out the settle)
    ("fired", "scheduled_when", "fired_to_scheduled_s"),  # the triggerer wrote the event
    ("scheduled_when", "queued_when", "scheduled_to_queued_s"),  # a scheduler queued it
    ("queued_when", "process", "queued_to_process_s"),  # an executor slot, the task process
    ("process", "parsed", "dag_parse_s"),  # the DAG file parsed: the imports of its operators
    ("parsed", "post_execute", "execute_complete_s"),  # execute_complete (KPO: trigger_reentry)
    ("post_execute", "end_date", "post_execute_s"),  # its return value pushed, the end
)
#: Lines of the resumed task log that mark the steps (the first at or after the fire).
MARKS = {
    "process": "::group::Pre Execute",
    "parsed": "Worker startup parse complete",
    "post_execute": "::group::Post Execute",
}
#: The first try's process leaves its executor slot to the deferral here.
DEFERRED_LINE = "Pausing task as DEFERRED"
#: The provider's line that reports its job's outcome (once per try that reports it).
OUTCOME_LINE = "GPU-seconds:"
#: Within the provider's ``execute_complete``: its lines (after the parse), each with what ran
#: before it since the previous one.
PROVIDER_MARKS = (
    ("completed_line", " Completed", "job marked reported (PATCH) and read"),
    ("gpu_seconds_line", "GPU-seconds:", "the job's pods listed"),
    ("master_tail_line", "[wandb-job-", "XCom gpu_seconds; the master's log read"),
    ("link_back_line", "W&B", "the task state store; the W&B run's link back"),
    ("deleted_line", "Deleted Volcano job", "the job read and deleted"),
    ("post_execute", "::group::Post Execute", "summary, return"),
)


class DoneSeen:
    """Watches of every Volcano job and every pod, per namespace: when its job was first seen
    ``Completed``, when its first pod ended, the job uids seen, and the tries that reported
    them (their ``reported-by-try`` annotation)."""

    def __init__(self, api) -> None:
        self.completed: dict[str, float] = {}
        self.pod_done: dict[str, float] = {}
        self.job_uids: dict[str, set[str]] = defaultdict(set)
        self.reported_by: dict[str, set[str]] = defaultdict(set)
        self._stop = threading.Event()
        custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        jobs = (custom.list_cluster_custom_object, "batch.volcano.sh", "v1alpha1", "jobs")
        for args, record in ((jobs, self._job), ((core.list_pod_for_all_namespaces,), self._pod)):
            threading.Thread(target=self._follow, args=(args, record), daemon=True).start()

    def _follow(self, args: tuple, record: Callable[[Any], None]) -> None:
        """Watch on from the last version seen, so that no change is missed between two
        watches; a relist after an error."""
        version = None
        while not self._stop.is_set():
            stream = watch.Watch()
            try:
                for event in stream.stream(*args, resource_version=version, timeout_seconds=60):
                    record(event["object"])
                version = stream.resource_version
            except Exception:
                version = None
                time.sleep(0.5)

    def _job(self, job: dict) -> None:
        namespace = job["metadata"]["namespace"]
        self.job_uids[namespace].add(job["metadata"]["uid"])
        if by := (job["metadata"].get("annotations") or {}).get(REPORTED_ANNOTATION):
            self.reported_by[namespace].add(by)
        phase = ((job.get("status") or {}).get("state") or {}).get("phase")
        if phase == "Completed":
            self.completed.setdefault(namespace, time.time())

    def _pod(self, pod: client.V1Pod) -> None:
        if pod.status and pod.status.phase in ("Succeeded", "Failed"):
            self.pod_done.setdefault(pod.metadata.namespace, time.time())

    def done(self, run: Run, family: str) -> float | None:
        """The moment ``run``'s job was seen ``Completed``, or KPO's pod ended."""
        namespace = run.watched.namespace
        return (self.pod_done if family == "kpo" else self.completed).get(namespace)

    def stop(self) -> None:
        self._stop.set()


def unpause(stack: AirflowStack, counts: dict[tuple[str, str], int]) -> None:
    """Wait for the DAGs of the families in ``counts`` to be parsed, and unpause them."""
    for dag_id in {DAGS[family] for family, _ in counts}:
        wait_for(lambda d=dag_id: stack.api("GET", f"/dags/{d}"), 240, f"DAG {dag_id}")
        stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})


def start(stack: AirflowStack, volcano_cluster, api, family: str, kind: str, index: int) -> Run:
    """Trigger ``family``'s DAG with its job (or pod) running ``KINDS[kind]`` seconds, in a
    namespace of its own."""
    namespace = volcano_cluster.create_namespace(f"e2e-{family.replace('_', '-')}-{index}")
    runs = str(KINDS[kind])
    if family == "floor":  # no job: the namespace only keys its row
        conf: dict[str, Any] = {"runs_s": runs}
    elif family == "kpo":
        conf = {"namespace": namespace, "runs_s": runs}
    else:
        template = seed_template(master={SIM_DURATION: runs}, worker={SIM_DURATION: runs})
        conf = {"template": template, "namespace": namespace}
    run_id = f"e2e-{index}-{family}-{kind}-{uuid.uuid4().hex[:6]}"
    stack.trigger(DAGS[family], run_id, conf)
    return Run(stack, DAGS[family], run_id, Watched(api, namespace))


def spread(counts: dict[tuple[str, str], int]) -> list[tuple[str, str]]:
    """Each ``(family, kind)`` ``counts`` times, spread evenly over the plan."""
    share = [((i + 0.5) / n, key) for key, n in counts.items() for i in range(n)]
    return [key for _, key in sorted(share)]


def run_plan(
    stack: AirflowStack,
    volcano_cluster,
    api,
    seen: DoneSeen,
    plan: list[tuple[str, str]],
    in_flight: int,
    on_row: Callable[[dict], None],
    namespaces: list[str],
    timeout: float = 900,
) -> None:
    """Start ``plan``'s tasks in order, at most ``in_flight`` of them unended at once (a
    slow one holds back only its own place); each ended task's row goes to ``on_row``, each
    namespace used to ``namespaces``, for the caller to delete."""
    pending = list(enumerate(plan))
    running: list[tuple[Run, str, str, float]] = []
    while pending or running:
        while pending and len(running) < in_flight:
            index, (family, kind) = pending.pop(0)
            run = start(stack, volcano_cluster, api, family, kind, index)
            namespaces.append(run.watched.namespace)
            running.append((run, family, kind, time.monotonic()))
        stack.check_alive()
        for entry in list(running):
            run, family, kind, began = entry
            try:
                ti = run.ti()
            except (ApiError, httpx.HTTPError):  # no task instance yet, or a busy API server
                ti = {"state": None}
            if ti["state"] in ENDED:
                running.remove(entry)
                on_row(ended_row(stack, run, family, kind, seen, ti))
            elif time.monotonic() - began > timeout:
                raise AssertionError(f"{run.run_id} still {ti['state']} after {timeout:g}s")
        time.sleep(2)


def _time(stamp: str | None) -> float | None:
    if not stamp:
        return None
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _log_lines(path: Path) -> list[tuple[float, str]]:
    """A JSON-lines Airflow log as (wall time, event) pairs; lines of another shape skipped."""
    lines = []
    for text in path.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(text)
            lines.append((_time(entry["timestamp"]), str(entry.get("event", ""))))
        except (ValueError, KeyError, TypeError):
            continue
    return lines


def _task_dirs(stack: AirflowStack, run: Run) -> list[Path]:
    """The run's train task's log folder in each folder the stack writes task logs to: one
    under LocalExecutor, each worker's and triggerer's own under CeleryExecutor."""
    where = Path(f"dag_id={run.dag_id}") / f"run_id={run.run_id}" / "task_id=train"
    return [folder / where for folder in stack.task_log_folders()]


def task_lines(stack: AirflowStack, run: Run) -> list[tuple[float, str]]:
    """The first try's task log: its first process's lines, then a resumed one's (under
    Celery the two may be in two workers' folders: merged by time)."""
    paths = [d / "attempt=1.log" for d in _task_dirs(stack, run) if (d / "attempt=1.log").exists()]
    lines = [line for path in paths for line in _log_lines(path)]
    return sorted(lines, key=lambda line: line[0] or 0.0) if len(paths) > 1 else lines


def _fired_at(stack: AirflowStack, run: Run) -> float | None:
    """When the trigger fired: the triggerer's ``Trigger fired event`` line in the trigger's
    log (the first, should two triggerers have run it)."""
    fired = [
        at
        for folder in _task_dirs(stack, run)
        for path in folder.glob("attempt=1.log.trigger.*.log")
        for at, event in _log_lines(path)
        if event == "Trigger fired event"
    ]
    return min(fired) if fired else None


def _first(lines: list[tuple[float, str]], mark: str, after: float | None) -> float | None:
    if after is None:
        return None
    return next((at for at, event in lines if at >= after and mark in event), None)


def _since(start: float | None, end: float | None) -> float | None:
    return round(end - start, 3) if start and end else None


def _provider_steps(lines: list[tuple[float, str]], parsed: float | None) -> dict:
    """Seconds before each of the provider's lines in ``execute_complete`` since the one
    before (from the end of the parse); a line not found counts with the next."""
    steps, previous = {}, parsed
    for name, mark, _ in PROVIDER_MARKS:
        at = _first(lines, mark, previous)
        if at is not None and previous is not None:
            steps[name] = round(at - previous, 3)
            previous = at
    return steps


def ended_row(
    stack: AirflowStack, run: Run, family: str, kind: str, seen: DoneSeen, ti: dict
) -> dict:
    """What an ended task cost: done to success, the slot its first try held, and for a task
    resumed after a deferral the steps between."""
    times = {key: _time(ti.get(key)) for key in ("scheduled_when", "queued_when", "start_date")}
    times["end_date"] = ended = _time(ti.get("end_date"))
    times["fired"] = fired = _fired_at(stack, run)
    times["done"] = fired if family == "floor" else seen.done(run, family)
    lines = task_lines(stack, run)
    deferral = _first(lines, DEFERRED_LINE, times["start_date"] or 0)
    row = {
        "run_id": run.run_id,
        "namespace": run.watched.namespace,
        "family": family,
        "kind": kind,
        "state": ti["state"],
        "try_number": ti["try_number"],
        "deferred": deferral is not None,
        "done_to_success_s": _since(times["done"], ended),
        "pod_done_to_success_s": _since(seen.pod_done.get(run.watched.namespace), ended),
        "task_s": _since(times["start_date"], ended),
        "start_to_done_s": _since(times["start_date"], times["done"]),
        "first_try_slot_s": _since(times["start_date"], deferral or ended),
        "fired_to_success_s": _since(fired, ended),
        "outcome_lines": sum(OUTCOME_LINE in event for _, event in lines),
    }
    if fired:  # resumed on a worker: the steps
        resumed = [(at, event) for at, event in lines if at >= fired]
        times["process"] = _first(resumed, MARKS["process"], fired)
        times["parsed"] = _first(resumed, MARKS["parsed"], times["process"])
        times["post_execute"] = _first(resumed, MARKS["post_execute"], times["parsed"])
        row.update({name: _since(times[a], times[b]) for a, b, name in STEPS})
        if family.startswith("provider"):
            row["execute_complete_steps_s"] = _provider_steps(resumed, times["parsed"])
    return row


def lost(row: dict) -> bool:
    """A task that did not succeed on its first try."""
    return (row["state"], row["try_number"]) != ("success", 1)

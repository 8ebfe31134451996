"""The manual DAG's run through a real Airflow, as the end-to-end test drives and reads it.

``start`` triggers ``dags/volcano_pytorch_manual.py`` through Airflow's REST API and follows it
to the end: it cordons the cluster's nodes until the ``wait`` task has deferred to the triggerer
(a simulated pod could otherwise finish before the sensor starts), then releases them. The job's
master then "trains" for up to ``TRAINS_FOR`` seconds (the simulated kubelet's duration
annotation, on a copy of the DAG's template), while its W&B run on the stand-in reports its step
and total steps as the progress contract says (docs/trainer.md): the wait task's log gets the
progress lines a real run's would. Once that log shows two progress lines with an ETA and the
master's lines, the run logs its final summary and the master exits (``end_master``): the
training lasts as long as the test needs. What is simulated: the pods (KWOK) and the W&B server
(``test_support/wandb_standin.py``); Airflow, the triggerer, PostgreSQL, Kubernetes and Volcano
are real.
"""

from __future__ import annotations

import contextlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import yaml

from airflow_volcano_wandb.testing.cluster.podlogs import DURATION_ANNOTATION
from airflow_volcano_wandb.testing.recorder import Recorder
from airflow_volcano_wandb.wandb.wandb_run import deterministic_run_id
from airflow_volcano_wandb.wandb.wandb_urls import run_url
from test_support import training_report
from test_support.cluster_jobs import end_master
from test_support.wandb_standin import WandbStandin
from tests.e2e.airflow_stack import REPO, AirflowStack, wait_for
from tests.e2e.cluster_probe import get_job, nodes_cordoned

DAG_ID = "volcano_pytorch_manual"
WORKERS = 3
#: Every rank's GPUs: the simulated nodes have 8 each, and the task log counts GPU-hours.
GPUS = 1
ARTIFACTS = REPO / "test-artifacts" / "e2e"
TRIGGER_CLASSPATH = "airflow_volcano_wandb.triggers.volcano.VolcanoJobTrigger"
API_KEY = "standin" + "0a1b2c3d4e5f6789" * 3
#: How long the master trains once its gang is placed, unless the test ends it first
#: (``end_master``: once the lines it waits for are shown), and the steps it reports meanwhile.
TRAINS_FOR, TOTAL_STEPS = 75, 1500
#: The run's pace: its last step ``REPORTS_FOR`` s after it starts (when the nodes are
#: released, possibly before the pod runs), ``TRAINS_FOR - REPORTS_FOR`` before the pod would
#: exit. Its final summary goes first, as a real trainer's ``run.finish()`` syncs it before the
#: process ends.
REPORTS_FOR = 55
#: What the W&B run's summary ends with (the DAG's wandb_summary_keys, and its runtime).
FINAL_SUMMARY = {"eval/accuracy": 0.9375, "eval/loss": 0.1912}
#: A line of the master's, as the trigger follows its log into the wait task's.
MASTER_LINE = re.compile(r"^\[\S+-master-0\] ")


@dataclass
class E2ERun:
    """What the test saw while the DAG run ran."""

    stack: AirflowStack
    standin: WandbStandin
    namespace: str
    dag_run_id: str
    dag_run: dict[str, Any]
    params: dict[str, Any]
    wait_states: list[str] = field(default_factory=list)
    deferred_ti: dict[str, Any] | None = None
    trigger_lines_while_held: list[str] = field(default_factory=list)
    wait_log: list[dict[str, Any]] = field(default_factory=list)
    job: dict[str, Any] | None = None
    pods_by_task: dict[str, list[Any]] = field(default_factory=dict)

    def page(self) -> tuple[str, str, str]:
        """Where the UI shows this DAG run (base URL, DAG, run): what ``tests.e2e.ui``'s
        page readers take after the browser."""
        return self.stack.base_url, DAG_ID, self.dag_run_id

    def ti_path(self, task_id: str) -> str:
        return f"/dags/{DAG_ID}/dagRuns/{quote(self.dag_run_id, safe='')}/taskInstances/{task_id}"

    def task_instance(self, task_id: str) -> dict[str, Any]:
        return self.stack.api("GET", self.ti_path(task_id))

    def xcom(self, task_id: str, key: str) -> Any:
        value = self.stack.api("GET", f"{self.ti_path(task_id)}/xcomEntries/{key}")["value"]
        return json.loads(value) if isinstance(value, str) and value[:1] in "{[" else value

    def run_id(self) -> str:
        """The W&B run id the submit task gives the job."""
        return deterministic_run_id(DAG_ID, "submit", self.dag_run_id)

    def expected_wandb_url(self) -> str:
        entity, project = self.params["wandb_entity"], self.params["wandb_project"]
        return run_url(self.standin.url, entity, project, self.run_id())


def wandb_conn(standin: WandbStandin) -> dict[str, Any]:
    """The ``wandb_default`` connection: the stand-in, with a key. Its entity and project
    differ from the DAG's params on purpose: the link must follow what the task used."""
    return {
        "conn_type": "wandb",
        "host": standin.url,
        "password": API_KEY,
        "extra": {"entity": "conn-entity", "project": "conn-project"},
    }


def training_template(folder: Path) -> Path:
    """The DAG's template, its master annotated to run ``TRAINS_FOR`` seconds on the
    simulated kubelet (``[volcano_pytorch_manual] template`` names it)."""
    text = (REPO / "dags" / "templates" / "volcano-pytorch-manual.yaml").read_text()
    template = yaml.safe_load(text)
    master = next(t for t in template["spec"]["tasks"] if t["name"] == "master")
    annotations = master["template"].setdefault("metadata", {}).setdefault("annotations", {})
    annotations[DURATION_ANNOTATION] = str(TRAINS_FOR)
    path = folder / "volcano-pytorch-manual-trains.yaml"
    path.write_text(yaml.safe_dump(template, sort_keys=False))
    return path


def reporting_progress(run: E2ERun) -> contextlib.AbstractContextManager[None]:
    """The run reports its step every second while the master trains, then its final
    summary (once its last step is reached, or when the block ends), as a trainer following
    the progress contract does."""
    where = (run.params["wandb_entity"], run.params["wandb_project"], run.run_id())
    return training_report.reporting(
        run.standin,
        [where],
        reports_for=REPORTS_FOR,
        total_steps=TOTAL_STEPS,
        final_summary=FINAL_SUMMARY,
    )


@contextlib.contextmanager
def start(airflow: AirflowStack, standin: WandbStandin, volcano_cluster, namespace: str):
    """Trigger the manual DAG with ``WORKERS`` workers of ``GPUS`` GPUs through the REST API
    and follow it to the end; yields the :class:`E2ERun`."""
    api_client = volcano_cluster.api_client()
    recorder = Recorder.pods(api_client, namespace)
    job_recorder = Recorder.jobs(api_client, namespace)
    try:
        # The DAG processor parses dags/ every few seconds: wait for the DAG to be served.
        dag = wait_for(lambda: airflow.api("GET", f"/dags/{DAG_ID}"), 180, f"DAG {DAG_ID}")
        assert dag["is_paused"], "a new DAG starts paused (dags_are_paused_at_creation)"
        details = airflow.api("GET", f"/dags/{DAG_ID}/details")
        airflow.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})

        conf = {"worker_replicas": WORKERS, "gpus_per_worker": GPUS, "namespace": namespace}
        params = {name: p["value"] for name, p in details["params"].items()} | conf
        dag_run_id = f"e2e-{uuid.uuid4().hex[:8]}"
        run = E2ERun(airflow, standin, namespace, dag_run_id, {}, params)
        standin.add_run(
            params["wandb_entity"],
            params["wandb_project"],
            run.run_id(),
            summary={},
            state="running",
        )

        with nodes_cordoned(api_client) as release:
            airflow.trigger(DAG_ID, dag_run_id, conf)

            def deferred_with_trigger() -> dict[str, Any] | None:
                airflow.check_alive()
                ti = run.task_instance("wait")
                note(run.wait_states, ti["state"])
                if ti["state"] in ("failed", "upstream_failed", "success"):
                    raise AssertionError(
                        f"wait ended {ti['state']} before it deferred; submit's log:\n"
                        + text(task_log(run, "submit"))[-4000:]
                    )
                if ti["state"] == "deferred" and ti.get("trigger") and ti.get("triggerer_job"):
                    return ti
                return None

            run.deferred_ti = wait_for(
                deferred_with_trigger, 240, "the sensor to defer to the triggerer", interval=0.5
            )
            # Let the trigger start its watch and report the job, still waiting for nodes.
            run.trigger_lines_while_held = wait_for(
                lambda: trigger_lines(task_log(run, "wait")),
                180,
                "the trigger to report the job from the triggerer",
                interval=1,
            )
            job = get_job(api_client, namespace, run.xcom("submit", "volcano_job")["name"])
            assert job.get("status", {}).get("state", {}).get("phase") != "Completed", job
            release()

            def run_finished() -> dict[str, Any] | None:
                airflow.check_alive()
                note(run.wait_states, run.task_instance("wait")["state"])
                dag_run = airflow.api("GET", f"/dags/{DAG_ID}/dagRuns/{dag_run_id}")
                return dag_run if dag_run["state"] in ("success", "failed") else None

            with reporting_progress(run):
                wait_for(
                    lambda: shows_progress_and_master_lines(run),
                    120 + TRAINS_FOR,
                    "two progress lines with an ETA and the master's lines in the wait's log",
                    interval=2,
                )
            # The run logged its final summary (leaving the block): now the training ends.
            end_master(api_client, namespace)
            run.dag_run = wait_for(run_finished, 240, "the DAG run to finish", interval=1)
        note(run.wait_states, run.task_instance("wait")["state"])
        # The sensor deletes the completed job: its last state is what the watch saw.
        job_recorder.stop()
        if job_recorder.error:
            raise job_recorder.error
        run.job = job_recorder.last_seen(run.xcom("submit", "volcano_job")["name"])
        (ARTIFACTS / "logs" / "volcano-job.json").write_text(json.dumps(run.job, indent=2))
        run.wait_log = task_log(run, "wait")
        (ARTIFACTS / "logs" / "wait-task-log-via-api.jsonl").write_text(text(run.wait_log))
        # Volcano deletes a completed job's remaining pods soon after; give the watch a beat.
        time.sleep(1)
        recorder.stop()
        if recorder.error:
            raise recorder.error
        run.pods_by_task = recorder.by_task()
        yield run
    finally:
        recorder.stop()
        job_recorder.stop()
        api_client.close()


def task_log(run: E2ERun, task_id: str, try_number: int = 1) -> list[dict[str, Any]]:
    """The task's log lines as the UI shows them: the worker's and the triggerer's."""
    answer = run.stack.api(
        "GET", f"{run.ti_path(task_id)}/logs/{try_number}", params={"full_content": "true"}
    )
    return [
        line if isinstance(line, dict) else {"event": str(line)}
        for line in answer.get("content", [])
    ]


def shows_progress_and_master_lines(run: E2ERun) -> bool:
    """Whether the wait task's log, read while it is deferred, holds two progress lines with
    an ETA from the trigger, and a line of the master's that it followed."""
    run.stack.check_alive()
    ti = run.task_instance("wait")
    note(run.wait_states, ti["state"])
    if ti["state"] != "deferred":
        raise AssertionError(f"wait left deferred before its lines were shown: {ti['state']}")
    events = [str(line.get("event")) for line in task_log(run, "wait")]
    with_eta = [e for e in events if e.startswith("progress: step") and ", ETA " in e]
    return len(with_eta) >= 2 and any(MASTER_LINE.match(event) for event in events)


def trigger_lines(lines: list[dict[str, Any]]) -> list[str]:
    """What the VolcanoJobTrigger itself logged, in the triggerer: not the master's lines it
    relays (``[<pod>] <line>``), which may come in any order around its verdict."""
    return [
        str(line["event"])
        for line in lines
        if line.get("logger") == TRIGGER_CLASSPATH and not str(line["event"]).startswith("[")
    ]


def text(lines: list[dict[str, Any]]) -> str:
    return "\n".join(json.dumps(line) for line in lines)


def note(states: list[str], state: str | None) -> None:
    if state and (not states or states[-1] != state):
        states.append(state)

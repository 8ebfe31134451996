"""3 and 4. The operator's ``execute()`` start to job created, and the end-to-end overhead
under ``dag.test()``: the test DAGs ``avw_test_sync`` and ``avw_test_deferrable`` in turns, on
the seed with a fixed simulated run, in a child process (this file as a program) that stamps
``execute()`` and ``create_job``; the parent joins an observer's job stamps (``run``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from common import child, say, summary, table
from waiters import Observer

KEYS = ("submit_overhead_s", "e2e_overhead_s", "e2e_sim_duration_s")
NEEDS = "db"
OPTIONS = {"e2e_runs": (4, 1, "dag.test() runs per mode")}
STAMPS: dict[str, dict[str, float]] = {}


def run(ctx) -> dict:
    cluster, runs = ctx.cluster, ctx.e2e_runs
    namespace = cluster.create_namespace("bench-e2e")
    observer = Observer(cluster, namespace, ctx.work)
    say(f"e2e: dag.test() x {runs} per mode (plus one warm-up) in {namespace}")
    args = ("--namespace", namespace, "--runs", runs + 1)
    data = child("scenario_e2e.py", *args, out=ctx.work / "e2e.json", env=ctx.env)
    observer.stop()
    running, completed = observer.first("Running"), observer.first("Completed")
    per_mode: dict[str, dict[str, list[float]]] = {}
    submit: list[float] = []
    for one in data["runs"]:  # the first run pays the imports: a warm-up
        if one["job"].endswith("-0") or one["state"] != "success" or one["job"] not in completed:
            continue
        done, task = completed[one["job"]]["t"], one["ti_end"] - one["ti_start"]
        job_run = done - running[one["job"]]["t"]
        steps = {
            "overhead": task - job_run,
            "task": task,
            "job_running": job_run,
            "after_completed": one["ti_end"] - done,
            "before_created": one["created"] - one["ti_start"],
            "overhead_vs_lifetime": task - (done - one["created"]),
        }
        for step, value in steps.items():
            per_mode.setdefault(one["mode"], {}).setdefault(step, []).append(value)
        submit.append(one["created"] - one["execute_start"])
    cluster.delete_namespace(namespace)
    return {
        "submit_overhead_s": summary(submit),
        "e2e_overhead_s": {
            mode: {k: summary(v, 3) for k, v in m.items()} for mode, m in per_mode.items()
        },
        "e2e_sim_duration_s": data["duration"],
    }


def section(r: dict) -> list[str]:
    def cells(mode: str, m: dict) -> list:
        median = {k: f"{v['median']} s" for k, v in m.items()}
        overhead = f"{median['overhead']} (p99 {m['overhead']['p99']})"
        return [mode, median["task"], median["job_running"], overhead, median["before_created"]]

    head = "mode | task duration | job running (Running to Completed) | overhead | "
    head += "task start to job created | job Completed to task end | n"
    rows = r["e2e_overhead_s"].items()
    return table(
        head,
        *(
            [*cells(*x), f"{x[1]['after_completed']['median']} s", x[1]["overhead"]["n"]]
            for x in rows
        ),
    )


def instrument() -> None:
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook
    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

    execute, create = VolcanoPyTorchJobOperator.execute, VolcanoHook.create_job
    current: dict[str, float] = {}

    def timed_execute(self, context):
        current["execute_start"] = time.time()
        return execute(self, context)

    def timed_create(self, body, namespace):
        job, started = create(self, body, namespace), current.get("execute_start", float("nan"))
        STAMPS[body["metadata"]["name"]] = {"execute_start": started, "created": time.time()}
        return job

    VolcanoPyTorchJobOperator.execute = timed_execute
    VolcanoHook.create_job = timed_create


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--runs", type=int, default=5, help="runs per mode")
    parser.add_argument("--duration", type=float, default=5.0, help="simulated pod run (s)")
    parser.add_argument("--out", required=True)
    options = parser.parse_args()

    from test_support.cluster_jobs import seed_template
    from test_support.jobs import DURATION_ANNOTATION, load_dag

    instrument()
    from airflow.models import TaskInstance
    from airflow.utils.session import create_session

    simulated = {DURATION_ANNOTATION: str(options.duration)}
    template = seed_template(master=simulated, worker=simulated)
    # The suite's test DAGs, copied into the DAGs folder by run_all.py (dag.test() runs DAGs
    # from there), read as a file: the benchmark imports nothing from tests/.
    test_dags = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"]) / "avw_test_jobs.py"
    dags = {mode: load_dag(test_dags, f"avw_test_{mode}") for mode in ("sync", "deferrable")}
    runs = []
    for i in range(options.runs):
        for mode in ("sync", "deferrable") if i % 2 == 0 else ("deferrable", "sync"):
            job_name = f"e2e-{mode}-{i}"
            conf, wall0 = {"template": template, "job_name": job_name}, time.time()
            dag_run = dags[mode].test(run_conf={**conf, "namespace": options.namespace})
            wall1 = time.time()
            with create_session() as session:
                query = session.query(TaskInstance).filter_by(run_id=dag_run.run_id)
                ti = query.filter_by(dag_id=dags[mode].dag_id, task_id="train").one()
                state, start, end = ti.state, ti.start_date, ti.end_date
            runs.append(
                {
                    "mode": mode,
                    "job": job_name,
                    "state": str(state),
                    "ti_start": start.timestamp() if start else None,
                    "ti_end": end.timestamp() if end else None,
                    "dag_test_s": wall1 - wall0,
                    **STAMPS.get(job_name, {}),
                }
            )
            took = f"task {end.timestamp() - start.timestamp():.2f}s" if start and end else ""
            print(f"{mode:<10} {job_name:<18} {state} {took}", flush=True)
    Path(options.out).write_text(json.dumps({"duration": options.duration, "runs": runs}))
    os._exit(0)  # skip slow interpreter teardown (wandb, providers)


if __name__ == "__main__":
    main()

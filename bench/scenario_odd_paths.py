"""9. Odd paths a deployment meets once in a while (issue 21), each in a child process of its
own (this file as a program, which ``run`` starts; its figures reach the results file only
through ``run_all.py``):
``restart-false-timeouts`` (triggers restarted while gangs lose and regain workers: every
``pending_timeout`` is a false one), ``fixed-name`` (try 2 of a fixed ``job_name`` replaces
try 1's failed job) and ``crash-loop`` (a master's first crash to its task's end). What each
measures: docs/performance.md.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

from common import (
    MERGE_PATCH,
    Cluster,
    TaskInstance,
    child,
    parse_k8s_time,
    say,
    tiny_job,
    wait_until,
)

KEYS = ("odd_paths",)
NEEDS = "db"
PENDING_TIMEOUT = 5.0
ROUND_S = 3.0
PARTS = ("restart-false-timeouts", "crash-loop", "fixed-name")


def run(ctx) -> dict:
    """Each odd path's figures, measured in a child process each."""

    def part(name: str, *args: Any) -> dict:
        out = ctx.work / f"odd-{name}.json"
        result = child("scenario_odd_paths.py", name, *args, out=out, env=ctx.env, quiet=True)
        return figures(name, result)

    on = ("--cluster-dir", ctx.cluster.state_dir)
    restart = part("restart-false-timeouts", "--restarts", 5 if ctx.quick else 20, *on)
    crash = part("crash-loop", *on)
    namespace = ctx.cluster.create_namespace("bench-fixed-name")
    fixed = part("fixed-name", "--namespace", namespace)
    say(f"odd paths: fixed name retry: {fixed}")
    ctx.cluster.delete_namespace(namespace)
    return {"odd_paths": {**restart, **crash, **fixed}}


def figures(part: str, result: dict) -> dict:
    """One part's figures as ``odd_paths`` in the results file holds them."""
    if part == "fixed-name":
        return {"fixed_name_retries_ok": bool(result["ok"])}
    if part == "crash-loop":
        return {"crash_loop_detect_s": result["crash_loop_detect_s"], "crash_loop_run": result}
    return {"restart_false_timeouts": result["restart_false_timeouts"], "restart_run": result}


def section(r: dict) -> list[str]:
    o = r["odd_paths"]
    restart, crash = o.get("restart_run", {}), o.get("crash_loop_run", {})
    said = {
        "restart_false_timeouts": lambda n: (
            f"{n} pending timeouts of {restart['jobs']} jobs whose gang was whole, over "
            f"{restart['restarts']} restarts of every trigger with {restart['evictions']} "
            "workers evicted and kept unplaceable meanwhile (`pending_timeout` "
            f"{restart['pending_timeout_s']} s)."
        ),
        "fixed_name_retries_ok": lambda ok: (
            f"{ok} (a retry under a fixed `job_name` after a failed, reported try replaces that "
            "job and succeeds)."
        ),
        "crash_loop_detect_s": lambda s: (
            f"{s} s from a seed master's first crash under `restartPolicy: OnFailure` to its "
            f"deferred task's end ({crash.get('task_state')}, default `max_container_restarts` "
            f"{crash.get('max_container_restarts')}; the simulated kubelet restarts without "
            "back-off)."
        ),
    }
    return [f"- `{key}`: {line(o[key])}" for key, line in said.items() if key in o]


def gang_job(name: str, home_label: str, min_available: int) -> dict:
    """Master and one worker, both running for 10 minutes; the worker only on nodes that
    carry ``home_label`` (the bench takes it away to keep a replaced worker Pending)."""
    body = tiny_job(name, 600)
    master = body["spec"]["tasks"][0]
    del master["policies"]
    worker = copy.deepcopy(master)
    worker["name"] = worker["template"]["spec"]["containers"][0]["name"] = "worker"
    worker["template"]["spec"]["nodeSelector"] = {home_label: "yes"}
    body["spec"].update(minAvailable=min_available, tasks=[master, worker])
    return body


def label_nodes(cluster: Cluster, nodes: list[str], label: str, value: str | None) -> None:
    patch = {"metadata": {"labels": {label: value}}}
    for node in nodes:
        cluster.kube.request("PATCH", f"/api/v1/nodes/{node}", patch, content_type=MERGE_PATCH)


def evict_workers(cluster: Cluster, namespace: str, names: list[str]) -> int:
    """Delete the worker pod of each named job (as an eviction would)."""
    evicted = 0
    for pod in cluster.pods(namespace):
        name = pod["metadata"]["name"]
        if any(name.startswith(f"{job}-worker-") for job in names):
            path = f"/api/v1/namespaces/{namespace}/pods/{name}?gracePeriodSeconds=0"
            cluster.kube.request("DELETE", path)
            evicted += 1
    return evicted


async def one_triggerer_life(
    names: list[str], namespace: str, seconds: float, until=None
) -> list[dict]:
    """Wait on every job for ``seconds`` (or, with ``until``, until it answers true) in a fresh
    event loop; the events that fired."""
    from airflow_volcano_wandb.triggers import VolcanoJobTrigger

    async def wait(name: str) -> dict | None:
        trigger = VolcanoJobTrigger(
            job_name=name, namespace=namespace, pending_timeout=PENDING_TIMEOUT, poll_interval=1
        )
        try:
            async for event in trigger.run():
                return {"job": name, **event.payload}
        except asyncio.CancelledError:
            return None
        return None

    tasks = [asyncio.create_task(wait(name)) for name in names]
    deadline = time.monotonic() + seconds
    while until is not None and not await asyncio.to_thread(until):
        if time.monotonic() > deadline:
            raise TimeoutError("the first triggers did not mark every gang whole")
        await asyncio.sleep(1)
    done, pending = await asyncio.wait(tasks, timeout=max(0.0, deadline - time.monotonic()))
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    return [t.result() for t in done if t.result()]


def restart_false_timeouts(cluster: Cluster, jobs: int, restarts: int) -> dict:
    from airflow_volcano_wandb.wait.judge import GANG_WHOLE_ANNOTATION

    namespace = cluster.create_namespace("bench-odd-restarts")
    home = f"avw-bench.io/worker-home-{namespace}"
    nodes = [n["metadata"]["name"] for n in cluster.kube.get("/api/v1/nodes")["items"]]
    label_nodes(cluster, nodes, home, "yes")
    names = [f"gang-{i}" for i in range(jobs)]
    events: list[dict] = []
    evictions = 0
    try:
        bodies = [gang_job(name, home, 2 if i % 2 else 1) for i, name in enumerate(names)]
        cluster.create_jobs(namespace, bodies)
        cluster.wait_phase(namespace, jobs, {"Running"}, timeout=180)
        query = "?fieldSelector=status.phase%3DRunning"
        wait_until(lambda: len(cluster.pods(namespace, query)) >= 2 * jobs, 120, "every rank", 1)

        def seed_gangs_marked() -> bool:
            seeds = [j for j in cluster.list_jobs(namespace) if j["spec"]["minAvailable"] == 1]
            return all(GANG_WHOLE_ANNOTATION in j["metadata"].get("annotations", {}) for j in seeds)

        events += asyncio.run(one_triggerer_life(names, namespace, 120, until=seed_gangs_marked))
        for round_ in range(restarts):
            if round_ % 5 == 1:  # evictions in flight, their replacements stuck
                label_nodes(cluster, nodes, home, None)
                evictions += evict_workers(cluster, namespace, names[round_ % 2 :: 2])
            elif round_ % 5 == 4:  # the replacements placed again
                label_nodes(cluster, nodes, home, "yes")
            events += asyncio.run(one_triggerer_life(names, namespace, ROUND_S + PENDING_TIMEOUT))
    finally:
        label_nodes(cluster, nodes, home, None)
        cluster.delete_namespace(namespace)
    outcomes = dict(Counter(event["outcome"] for event in events))
    said = {"jobs": jobs, "restarts": restarts, "evictions": evictions}
    said |= {"pending_timeout_s": PENDING_TIMEOUT}
    return {
        **said,
        "restart_false_timeouts": outcomes.get("pending_timeout", 0),
        "events": outcomes,
    }


def _try(namespace: str, try_number: int, exit_code: str) -> dict[str, Any]:
    """One try of the task: the seed with a 1 s master ending with ``exit_code``, whose
    failing pod ends the job."""
    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
    from test_support.cluster_jobs import failing_template

    operator = VolcanoPyTorchJobOperator(
        task_id="train",
        template=failing_template("1", exit_code),
        image_uri="example.org/bench/trainer:1",
        namespace=namespace,
        job_name="bench-fixed-name",
        replicas={"worker": 0},
        wandb_entity="bench",
        wandb_project="bench",
        wandb_mode="offline",
        poll_interval=1,
    )
    ti = TaskInstance("bench_odd_paths", f"fixed-{namespace}", try_number=try_number)
    return operator.execute(ti.context())


def fixed_name(namespace: str) -> dict[str, Any]:
    try:
        _try(namespace, 1, "3")
        return {"ok": False, "detail": "try 1 succeeded; its master was to exit 3"}
    except Exception as exc:  # the expected failure of try 1
        first = type(exc).__name__
    try:
        result = _try(namespace, 2, "0")
    except Exception as exc:
        return {"ok": False, "detail": f"try 2 failed after try 1's {first}: {exc}"}
    return {"ok": result.get("phase") == "Completed", "detail": f"try 2 ended {result['phase']}"}


def crash_loop_detect(cluster: Cluster) -> dict:
    from airflow.models import TaskInstance as DbTaskInstance
    from airflow.utils.session import create_session

    from airflow_volcano_wandb.wait.restart_budget import DEFAULT_MAX_CONTAINER_RESTARTS
    from test_support.cluster_jobs import seed_template
    from test_support.jobs import DURATION_ANNOTATION, EXIT_CODE_ANNOTATION, load_dag

    os.environ["AIRFLOW__VOLCANO_WANDB__DEFER_SETTLE_SECONDS"] = "0"  # this child's wait only
    namespace = cluster.create_namespace("bench-odd-crash-loop")
    first_crash: list[float] = []
    done = threading.Event()

    def watch_master() -> None:
        while not done.is_set() and not first_crash:
            for pod in cluster.pods(namespace):
                if not pod["metadata"]["name"].endswith("-master-0"):
                    continue
                for status in pod["status"].get("containerStatuses") or []:
                    last = (status.get("lastState") or {}).get("terminated")
                    if status.get("restartCount") == 1 and last:
                        first_crash.append(parse_k8s_time(last["finishedAt"]))
                    elif (status.get("restartCount") or 0) > 1:  # missed: start + its second
                        first_crash.append(parse_k8s_time(pod["status"]["startTime"]) + 1)
            time.sleep(0.2)

    template = seed_template(
        master={DURATION_ANNOTATION: "1", EXIT_CODE_ANNOTATION: "3"},
        worker={DURATION_ANNOTATION: "600"},
    )
    # The suite's test DAGs, copied into the DAGs folder by run_all.py, read as a file.
    dags = Path(os.environ["AIRFLOW__CORE__DAGS_FOLDER"])
    dag = load_dag(dags / "avw_test_jobs.py", "avw_test_deferrable")
    threading.Thread(target=watch_master, daemon=True).start()
    try:
        dag_run = dag.test(run_conf={"template": template, "namespace": namespace})
    finally:
        done.set()
        cluster.delete_namespace(namespace)
    with create_session() as session:
        query = session.query(DbTaskInstance)
        ti = query.filter_by(dag_id=dag.dag_id, run_id=dag_run.run_id, task_id="train").one()
        state, end = str(ti.state), ti.end_date
    detect = end.timestamp() - first_crash[0] if end and first_crash else None
    return {
        "crash_loop_detect_s": round(detect, 2) if detect is not None else None,
        "task_state": state,
        "max_container_restarts": DEFAULT_MAX_CONTAINER_RESTARTS,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("part", choices=PARTS)
    parser.add_argument("--cluster-dir", type=Path, help="the cluster (all but fixed-name)")
    parser.add_argument("--jobs", type=int, default=10)
    parser.add_argument("--restarts", type=int, default=20)
    parser.add_argument("--namespace", help="fixed-name: where the task runs")
    parser.add_argument("--out", type=Path, required=True)
    o = parser.parse_args()
    if o.part == "fixed-name":
        result = fixed_name(o.namespace)
    elif o.part == "crash-loop":
        result = crash_loop_detect(Cluster(o.cluster_dir))
    else:
        result = restart_false_timeouts(Cluster(o.cluster_dir), o.jobs, o.restarts)
    o.out.write_text(json.dumps(result) + "\n")
    print(json.dumps(result))


if __name__ == "__main__":
    main()

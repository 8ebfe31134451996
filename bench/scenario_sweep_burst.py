"""7. A sweep's burst (issue 17): N mapped task instances run the operator's real ``execute()``
(deferrable) at once, threads of a child process (this file as a program) released by a
barrier, then again as retries that must reattach: submit p50/p99, duplicates, 429s; then the
wait on those jobs by the provider's trigger and by 2 s polling.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from common import SIM_DURATION, TaskInstance, child, percentile, say, table
from waiters import background, parse_metrics, waiter_row

KEYS = ("sweep_burst",)
NEEDS = "db"
OPTIONS = {"sweep_tasks": (200, 10, "mapped tasks at once")}


def pods(o) -> int:
    return 3 * o.sweep_tasks


def status_count(text: str, code: str) -> float:
    """Every request the apiserver answered with ``code``, from /metrics."""
    samples = parse_metrics(text, {"apiserver_request_total"})
    return sum(value for _, labels, value in samples if labels.get("code") == code)


def run(ctx) -> dict:
    from airflow_volcano_wandb.job.ownership import MANAGED_SELECTOR, MAP_INDEX_LABEL

    cluster, work, tasks = ctx.cluster, ctx.work, ctx.sweep_tasks
    namespace = cluster.create_namespace("bench-sweep")
    throttled = status_count(cluster.metrics(), "429")
    say(f"sweep: {tasks} mapped tasks submit at once in {namespace}, then again as retries")
    out = work / "sweep-burst.json"
    burst = child(
        "scenario_sweep_burst.py", "--namespace", namespace, "--tasks", tasks, out=out, env=ctx.env
    )
    http_429 = status_count(cluster.metrics(), "429") - throttled
    errors = [r["error"] for r in burst["first"] + burst["again"] if "error" in r]
    jobs = cluster.list_jobs(namespace, MANAGED_SELECTOR)
    per_index = Counter(job["metadata"]["labels"][MAP_INDEX_LABEL] for job in jobs)
    pairs = zip(burst["first"], burst["again"], strict=True)
    reattached = sum(1 for a, b in pairs if a.get("uid") == b.get("uid"))
    names_file = work / "sweep-jobs.json"
    submitted = [{"name": r["name"], "uid": r["uid"]} for r in burst["first"] if "uid" in r]
    names_file.write_text(json.dumps(submitted))
    idle = background(cluster, "sweep")
    waits = [
        waiter_row(ctx, namespace, names_file, tasks, (*how, ctx.env), idle, "sweep")
        for how in (("provider", "operator", 0), ("poll_2s", "poll", 2))
    ]
    cluster.delete_namespace(namespace)
    submit = [r["submit_s"] for r in burst["first"] if "submit_s" in r]
    retry = [r["submit_s"] for r in burst["again"] if "submit_s" in r]
    b = {"tasks": tasks, "submit_p50_s": round(percentile(submit, 50), 3)}
    b |= {"submit_p99_s": round(percentile(submit, 99), 3)}
    b |= {"retry_p50_s": round(percentile(retry, 50), 3), "jobs": len(jobs)}
    b |= {"duplicates": sum(n - 1 for n in per_index.values())}
    b |= {"map_indexes_without_a_job": tasks - len(per_index), "retries_reattached": reattached}
    b |= {"errors": errors[:5], "http_429": round(http_429)}
    return {"sweep_burst": {**b, "watch_connections": waits[0]["watch_connections"], "wait": waits}}


def section(r: dict) -> list[str]:
    b = r["sweep_burst"]
    head = "tasks | submit p50 | submit p99 | retry p50 | jobs | duplicates | retries reattached"
    row = [b["tasks"], *(f"{b[k]} s" for k in ("submit_p50_s", "submit_p99_s", "retry_p50_s"))]
    row += [b[k] for k in ("jobs", "duplicates", "retries_reattached", "http_429")]
    return [
        f"{b['tasks']} mapped task instances run `execute()` at once (threads of one process), "
        "then again as retries of the same try.",
        "",
        *table(head + " | HTTP 429 | errors", [*row, len(b["errors"])]),
        "",
        "Then the wait on those jobs, in one waiter process each:",
        "",
        *table(
            "waiter | watch connections | requests/min | CPU s/min",
            *(
                (
                    w["waiter"],
                    w["watch_connections"],
                    f"{w['requests_per_min']:,.0f}",
                    f"{w['cpu_s_per_min']:.2f}",
                )
                for w in b["wait"]
            ),
        ),
    ]


def _burst(operators: list, run_id: str) -> list[dict]:
    from airflow.exceptions import TaskDeferred

    barrier = threading.Barrier(len(operators))
    results: list[dict] = [{} for _ in operators]

    def one(index: int) -> None:
        ti = TaskInstance("bench_sweep", run_id, map_index=index)
        barrier.wait()
        start = time.time()
        try:
            operators[index].execute(ti.context())
            results[index] = {"error": "execute() returned without deferring"}
        except TaskDeferred:
            results[index] = {"submit_s": time.time() - start, **ti.xcoms["volcano_job"]}
        except Exception as exc:  # a figure, not a crash: the parent reports it
            results[index] = {"error": f"{type(exc).__name__}: {exc}"}

    with ThreadPoolExecutor(len(operators)) as pool:
        list(pool.map(one, range(len(operators))))
    return results


def main() -> None:
    """The burst (in the child process): the submit times and the submitted jobs (name, uid
    per map index) as JSON (``--out``)."""
    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
    from airflow_volcano_wandb.wandb import sweep
    from test_support.cluster_jobs import seed_template

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--namespace", "--tasks", "--out"):
        parser.add_argument(flag, required=True)
    options = parser.parse_args()
    # The jobs run for 2 h: the parent measures the wait while every one is still waited on.
    hours = {SIM_DURATION: "7200"}
    template = seed_template(master=hours, worker=hours)
    lr = {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1}
    grid = sweep.points(
        {"method": "random", "run_cap": int(options.tasks), "parameters": {"lr": lr}}
    )
    operators = [
        VolcanoPyTorchJobOperator(
            task_id="train",
            template=template,
            image_uri="example.org/bench/trainer:1",
            namespace=options.namespace,
            wandb_entity="bench",
            wandb_project="bench",
            wandb_mode="offline",
            wandb_group=f"sweep/{options.namespace}",
            deferrable=True,
            **kwargs,
        )
        for kwargs in sweep.expand_kwargs(grid)
    ]
    run_id = f"sweep-{options.namespace}"
    first, again = _burst(operators, run_id), _burst(operators, run_id)
    Path(options.out).write_text(json.dumps({"first": first, "again": again}))


if __name__ == "__main__":
    main()

"""A sweep's burst: N mapped task instances of ``VolcanoPyTorchJobOperator`` submit at once.

Each map index runs the operator's real ``execute()`` (deferrable) in a thread of its own,
all released together by a barrier, as N Airflow workers picking up a freshly expanded task
would: render, list its task instance's jobs, create the job, write the key Secret, defer.
``submit_s`` is ``execute()`` start to ``TaskDeferred`` (the job exists and the task would
leave the worker). Then the same N task instances run ``execute()`` again, as a retry after a
lost answer does: each must reattach to its job, never submit a second.

Threads share one interpreter (the GIL), so the per-task figures include waiting for CPU on
top of what N separate workers would see; the apiserver sees N clients either way (each
operator has its own hook and connection pool).

Writes the submit times and the submitted jobs (name, uid per map index) as JSON (``--out``)
for ``bench/scenario_sweep_burst.py``, which counts duplicates, 429s and the wait's watch
connections.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

from airflow_volcano_wandb.wandb import sweep
from test_support.jobs import DURATION_ANNOTATION, with_pod_annotations

REPO = Path(__file__).resolve().parents[1]
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"


class _TaskInstance(SimpleNamespace):
    """What ``execute()`` reads of a task instance, and where its XComs go."""

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value


def _burst(operators: list, run_id: str, namespace: str) -> list[dict]:
    from airflow.exceptions import TaskDeferred

    barrier = threading.Barrier(len(operators))
    results: list[dict] = [{} for _ in operators]

    def one(index: int) -> None:
        ti = _TaskInstance(
            dag_id="bench_sweep",
            task_id="train",
            run_id=run_id,
            map_index=index,
            try_number=1,
            log_url=None,
            xcoms={},
        )
        context = {"ti": ti, "dag_run": SimpleNamespace(logical_date=None)}
        barrier.wait()
        start = time.time()
        try:
            operators[index].execute(context)
            results[index] = {"error": "execute() returned without deferring"}
        except TaskDeferred:
            job = ti.xcoms["volcano_job"]
            results[index] = {"submit_s": time.time() - start, **job}
        except Exception as exc:  # a figure, not a crash: the parent reports it
            results[index] = {"error": f"{type(exc).__name__}: {exc}"}

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(operators))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--tasks", type=int, required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()

    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator

    # The jobs run for 2 h: the parent measures the wait while every one is still waited on.
    template = with_pod_annotations(
        yaml.safe_load(SEED.read_text()),
        master={DURATION_ANNOTATION: "7200"},
        worker={DURATION_ANNOTATION: "7200"},
    )
    grid = sweep.points(
        {
            "method": "random",
            "run_cap": options.tasks,
            "parameters": {"lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 0.1}},
        }
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
    first = _burst(operators, run_id, options.namespace)
    again = _burst(operators, run_id, options.namespace)
    Path(options.out).write_text(json.dumps({"first": first, "again": again}))


if __name__ == "__main__":
    main()

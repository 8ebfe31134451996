"""The ``e2e_real_airflow`` benchmark's driver (issues 26 and 42): job or pod done to task
success through the real schedulers and triggerers of the production-shaped stack, the
provider's operator at its defaults beside ``KubernetesPodOperator(deferrable=True)``.

Marked ``long`` (not in ``make test``): ``bench/run_all.py --only e2e_real_airflow`` runs it as
a child process (the benchmarks import nothing from ``tests/``) and reads its figures from
``test-artifacts/reliability/e2e_real_airflow.json``; ``make test-long`` runs it too.

On the session's stack (``reliability_airflow``: PostgreSQL, two schedulers at ``parallelism``
2, two triggerers, and the executor that ``EXECUTOR`` names: two Celery workers of two slots
by default, or LocalExecutor, whose schedulers run the tasks; ``[volcano_wandb]`` at its
defaults, so
``defer_after`` 15 s on Airflow 3.3 and ``defer_settle_seconds`` 15 s):
``AVW_E2E_REAL_TASKS`` (10; the bench asks for 50) of the provider's tasks whose job ends at
once (1 s, inside the first window: the task never defers), and ``AVW_E2E_REAL_OTHERS`` (2;
the bench 10) of each other kind: the provider's job ending just after the deferral (inside
the settle) and long after it, KPO's pod ending at once and long after (the same moments as
the provider's), and Airflow's own deferral resuming on a worker as long after (the floor).
They are spread evenly over the run, at most ``AVW_E2E_REAL_IN_FLIGHT`` (10) unended at once,
each job or pod in a namespace of its own (``test_support/e2e_real.py``).

Asserted: every task of the provider succeeds on its first try, and every planned task ends.
KPO's losses (Airflow's deferral race: apache/airflow#23824, #67287, #72716) and all times
are figures, never asserted.
"""

from __future__ import annotations

import json
import os
import time

import pytest

from test_support.airflow_runs import ARTIFACTS
from test_support.e2e_real import DoneSeen, run_plan, spread, unpause
from test_support.e2e_real_figures import e2e_figures

pytestmark = [pytest.mark.e2e, pytest.mark.cluster, pytest.mark.long, pytest.mark.timeout(7200)]

TASKS = int(os.environ.get("AVW_E2E_REAL_TASKS", "10"))  # the bench passes 50
OTHERS = int(os.environ.get("AVW_E2E_REAL_OTHERS", "2"))  # the bench passes 10
IN_FLIGHT = int(os.environ.get("AVW_E2E_REAL_IN_FLIGHT", "10"))
COUNTS = {
    ("provider", "ends_at_once"): TASKS,
    ("provider", "ends_after_deferral"): OTHERS,
    ("provider", "ends_after_settle"): OTHERS,
    ("kpo", "ends_at_once"): OTHERS,
    ("kpo", "ends_after_settle"): OTHERS,
    ("floor", "ends_after_settle"): OTHERS,
}
FIGURES = ARTIFACTS / "e2e_real_airflow.json"


def test_job_or_pod_done_to_task_success_through_the_real_scheduler_and_triggerer(
    reliability_airflow, volcano_cluster, admin
):
    stack = reliability_airflow
    unpause(stack, COUNTS)
    planned = {f"{family} {kind}": n for (family, kind), n in COUNTS.items()}
    seen, rows, namespaces = DoneSeen(admin), [], []
    began = time.monotonic()

    def write() -> dict:  # after every 10 tasks too: a run cut short still tells
        figures = e2e_figures(rows, began, planned, IN_FLIGHT, stack.executor)
        FIGURES.parent.mkdir(parents=True, exist_ok=True)
        FIGURES.write_text(json.dumps({**figures, "runs": rows}, indent=2) + "\n")
        return figures

    def on_row(row: dict) -> None:
        rows.append(row)
        if len(rows) % 10 == 0:
            write()
            print(f"e2e_real_airflow: {len(rows)} of {sum(COUNTS.values())} ended", flush=True)

    try:
        run_plan(stack, volcano_cluster, admin, seen, spread(COUNTS), IN_FLIGHT, on_row, namespaces)
    finally:
        seen.stop()
        figures = write()
        for namespace in namespaces:
            volcano_cluster.delete_namespace(namespace)
    print(f"e2e_real_airflow: {json.dumps(figures, indent=2)}")
    assert not figures["wrong"], figures["wrong"]
    assert len(rows) == sum(COUNTS.values())

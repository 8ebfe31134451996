"""Trial 4 (issue 26): two triggerers each keep one watch per namespace, and the apiserver
requests per waiting job do not grow with the number of waiting jobs.

On the session's production-shaped stack (``reliability_airflow``: PostgreSQL, two schedulers,
two triggerers), ``AVW_WATCH_LOAD_JOBS`` (``small,large``; 2,8 in ``make test``, 2,20 in
``make test-ha``) deferred tasks wait on jobs that run until the test ends them, spread over
two namespaces. First the small set, all on triggerer A (B paused while they defer: it holds
nothing yet); then the rest, A filled to its capacity the same way and the others on B. After
each step the triggers settle, and for a window the test counts, **from the apiserver's side**,
what each triggerer asked: each triggerer talks to the apiserver as a user of its own
(``airflow_runs.TRIGGERER_USERS``), and the apiserver's audit log names the user, verb,
resource and namespace of every request (``test_support/apiserver_audit.py``).

Asserted, on counts rather than speed:

- each triggerer holds exactly one WATCH on Volcano jobs in each namespace where it has
  triggers, none elsewhere, at both sizes (never two open at once; one open at the end);
- the reads of Volcano jobs per minute do not grow with the number of waiting jobs (with
  the watch up, a trigger judges its job on the shared watch's cache);
- the requests per waiting job per minute do not grow either. They are not zero: a trigger
  whose restart budget counts (``max_container_restarts``, on by default in the operator)
  LISTs its running job's pods every ``[volcano_wandb] pod_check_interval`` (30 s), because a
  crash loop under ``restartPolicy: OnFailure`` never changes the job's status. That cost is
  per job, and reported in the figures (``test-artifacts/reliability/watch_load.json``,
  docs/reliability.md).

Then the jobs are ended: every task succeeds on its first try and no job was deleted.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_support.airflow_runs import (
    ARTIFACTS,
    HANDOVER_JOBS,
    TRIGGERER_USERS,
    Run,
    Watched,
)
from test_support.apiserver_audit import ApiUse, read_events
from test_support.cluster_jobs import SIM_DURATION, end_master, seed_template
from tests.e2e.airflow_stack import AirflowStack, wait_for

pytestmark = [pytest.mark.long, pytest.mark.e2e, pytest.mark.cluster, pytest.mark.timeout(1500)]

DAG_ID = "avw_rel_keep"  # on_finish_action="keep": a deletion would show
A, B = "triggerer", "triggerer-2"
SMALL, LARGE = (int(n) for n in os.environ.get("AVW_WATCH_LOAD_JOBS", "2,8").split(","))
#: The window each size is counted over, after the triggers settled.
WINDOW_S = float(os.environ.get("AVW_WATCH_LOAD_WINDOW_S", "30"))
SETTLE_S = 10.0
NAMESPACES = 2
JOBS = "jobs.batch.volcano.sh"
READS = ("get", "list", "watch")
FIGURES = ARTIFACTS / "watch_load.json"
FOREVER = "3600"


@contextlib.contextmanager
def _paused(stack: AirflowStack, component: str) -> Iterator[None]:
    """SIGSTOP a triggerer that holds no trigger (so nothing is handed over) meanwhile."""
    stack.send_signal(component, signal.SIGSTOP)
    try:
        yield
    finally:
        stack.send_signal(component, signal.SIGCONT)


def _start(stack: AirflowStack, api, namespace: str, index: int) -> Run:
    wait_for(lambda: stack.api("GET", f"/dags/{DAG_ID}"), 240, f"DAG {DAG_ID}")
    stack.api("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
    run_id = f"watch-load-{index}-{uuid.uuid4().hex[:6]}"
    template = seed_template(master={SIM_DURATION: FOREVER}, worker={SIM_DURATION: FOREVER})
    stack.trigger(DAG_ID, run_id, {"template": template, "namespace": namespace})
    # Not polled in the background: the test's own reads stay out of the apiserver's way.
    return Run(stack, DAG_ID, run_id, Watched(api, namespace))


def _assigned(runs: list[Run], timeout: float = 600) -> dict[str, int]:
    """Each run's task deferred with its trigger on a triggerer: run id -> triggerer job id."""
    if not runs:
        return {}
    for run in runs:
        run.wait_deferred(timeout=timeout)

    def ids():
        found = {r.run_id: (r.ti().get("trigger") or {}).get("triggerer_id") for r in runs}
        return found if all(found.values()) else None

    return wait_for(ids, timeout, "every trigger on a triggerer", interval=1)


def _measure(stack: AirflowStack, audit_log: Path, runs: list[Run], namespaces: list[str]):
    """Settle, count a window, and return the figures of this size."""
    by_job = _assigned(runs)
    placement = Counter(
        (TRIGGERER_USERS[stack.component_of_job(job_id)], run.watched.namespace)
        for run in runs
        for job_id in [by_job[run.run_id]]
    )
    _settle(audit_log, runs, set(placement), namespaces)
    start = time.time()
    time.sleep(WINDOW_S)
    end = time.time()
    time.sleep(1)
    use = ApiUse(read_events(audit_log, TRIGGERER_USERS.values()))
    minutes = (end - start) / 60
    requests = use.requests(start, end, namespaces)
    per_min = {f"{u} {v} {r}": round(n / minutes, 1) for (u, v, r), n in sorted(requests.items())}
    by_kind: Counter[str] = Counter()
    for (_, verb, resource), n in requests.items():
        by_kind[f"{verb} {resource}"] += n
    job_reads = sum(n for (_, v, r), n in requests.items() if r == JOBS and v in READS)
    total = sum(requests.values())
    return {
        "jobs": len(runs),
        "placement": {f"{u} {ns}": n for (u, ns), n in sorted(placement.items())},
        "watches_most_at_once": {
            f"{u} {ns}": n for (u, ns), n in sorted(use.watches(JOBS, start, end).items())
        },
        "watches_open_at_end": {
            f"{u} {ns}": n for (u, ns), n in sorted(use.open_watches(JOBS, end).items())
        },
        "window_s": round(end - start, 1),
        "requests_per_min": round(total / minutes, 1),
        "requests_per_min_per_job": round(total / minutes / len(runs), 1),
        "job_reads_per_min": round(job_reads / minutes, 1),
        "by_kind_per_min": {k: round(n / minutes, 1) for k, n in sorted(by_kind.items())},
        "by_triggerer_per_min": per_min,
        "_pairs": set(placement),
        "_watch_pairs": use.watches(JOBS, start, end),
        "_open_pairs": use.open_watches(JOBS, end),
    }


def _settle(audit_log: Path, runs: list[Run], pairs: set, namespaces: list[str]) -> None:
    """Until every trigger is past its first look: each (triggerer, namespace) pair watching,
    each job marked as a whole gang (one PATCH each), and no read of a job for ``SETTLE_S``
    (the first LIST and WATCH of a namespace come late on a loaded machine)."""

    def settled() -> bool:
        use = ApiUse(read_events(audit_log, TRIGGERER_USERS.values()))
        now = time.time()
        if set(use.open_watches(JOBS, now)) != pairs:
            return False
        mine = [e for e in use.events if e.namespace in namespaces and e.resource == JOBS]
        if sum(1 for e in mine if e.verb == "patch") < len(runs):
            return False
        return all(now - e.received >= SETTLE_S for e in mine if e.verb in READS)

    wait_for(settled, 600, "the triggers to settle on their watches", interval=2)


def _check_watches(size: dict) -> None:
    """One watch per (triggerer, namespace) that has triggers; none where it has none."""
    expected = dict.fromkeys(size["_pairs"], 1)
    assert size["_watch_pairs"] == expected, (size["jobs"], size["watches_most_at_once"])
    assert size["_open_pairs"] == expected, (size["jobs"], size["watches_open_at_end"])


def test_each_triggerer_keeps_one_watch_per_namespace_and_requests_stay_flat(
    reliability_airflow, volcano_cluster, admin
):
    stack = reliability_airflow
    audit_log = volcano_cluster.audit_log
    # Not a skip: a cluster without either cannot show what this trial claims (make test and
    # .ci/run start theirs with the audit log; the local cluster always has its CA).
    assert audit_log, "the cluster writes no audit log: start it with AVW_CLUSTER_AUDIT_LOG=1"
    assert (Path(volcano_cluster.state_dir) / "pki" / "ca.key").exists(), (
        "no CA key to give each triggerer an identity of its own"
    )
    capacity_a = HANDOVER_JOBS // 2
    assert SMALL <= capacity_a < LARGE, (SMALL, capacity_a, LARGE)
    namespaces = [volcano_cluster.create_namespace(f"watch-load-{i}") for i in range(NAMESPACES)]
    runs: list[Run] = []

    def start(count: int) -> list[Run]:
        new = [
            _start(stack, admin, namespaces[(len(runs) + i) % NAMESPACES], len(runs) + i)
            for i in range(count)
        ]
        runs.extend(new)
        return new

    try:
        with _paused(stack, B):  # the small set, all on A
            _assigned(start(SMALL))
        small = _measure(stack, audit_log, runs, namespaces)
        with _paused(stack, B):  # A filled to its capacity; B still holds nothing
            _assigned(start(capacity_a - SMALL))
        _assigned(start(LARGE - capacity_a))  # A is full: B takes these
        large = _measure(stack, audit_log, runs, namespaces)
        figures = {
            "sizes": [
                {k: v for k, v in size.items() if not k.startswith("_")} for size in (small, large)
            ],
            "namespaces": NAMESPACES,
            "poll_interval_s": 2,
        }
        FIGURES.parent.mkdir(parents=True, exist_ok=True)
        FIGURES.write_text(json.dumps(figures, indent=2) + "\n")
        print(f"watch load: {json.dumps(figures, indent=2)}")

        _check_watches(small)
        _check_watches(large)
        assert {u for u, _ in large["_pairs"]} == set(TRIGGERER_USERS.values())
        # Reads of jobs: the watches' own renewals at most (one per pair in a window), at
        # either size.
        renewals = len(large["_pairs"])
        assert large["job_reads_per_min"] * large["window_s"] / 60 <= renewals + 1, large
        assert small["job_reads_per_min"] * small["window_s"] / 60 <= len(small["_pairs"]) + 1
        # Per waiting job, the requests do not grow with the number of jobs (the pod LISTs
        # of the restart budget are per job: flat per job, linear in total).
        per_job = small["requests_per_min_per_job"]
        assert large["requests_per_min_per_job"] <= per_job * 1.5 + 2, (small, large)

        for namespace in namespaces:
            end_master(admin, namespace)
        for run in runs:
            run.expect_success()
        live = {j["metadata"]["uid"] for ns in namespaces for j in Watched(admin, ns).jobs()}
        assert len(live) == LARGE, "a job was deleted or duplicated"
    finally:
        for namespace in namespaces:
            volcano_cluster.delete_namespace(namespace)

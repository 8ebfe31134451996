"""A deferrable task first waits ``defer_after`` seconds in its worker (``parts/waiter.py``):
on the cluster, a job that ends within them ends the task without a deferral, and a job still
running then defers to the triggerer, which reports it. ``dag.test()`` says when it runs a
deferred task's trigger ("running trigger in line")."""

from __future__ import annotations

import pytest

from test_support.cluster_jobs import (
    SIM_DURATION,
    list_jobs,
    run_dag,
    seed_template,
    wait_until,
)

pytestmark = pytest.mark.cluster

DEFERRED = "[DAG TEST] running trigger in line"


@pytest.mark.parametrize(("master_seconds", "defers"), [("2", False), ("25", True)])
def test_a_short_job_ends_in_the_window_and_a_long_one_defers(
    master_seconds, defers, cluster, capfd, caplog
):
    api, namespace = cluster
    # The avw_test_defer_after DAG's window is 15 s: the short job ends well inside it (its
    # pods start within seconds on the local cluster), the long one well after it.
    template = seed_template(master={SIM_DURATION: master_seconds}, worker={SIM_DURATION: "600"})
    _, tis = run_dag("avw_test_defer_after", template=template, namespace=namespace)
    captured = capfd.readouterr()
    # The task's lines reach the console; dag.test()'s own ("[DAG TEST] ...") may reach only
    # the log records once an earlier test has set Airflow's logging up in this process.
    out = captured.out + captured.err + caplog.text
    assert tis["train"][0] == "success", out[-5000:]
    assert (DEFERRED in out) is defers, out[-5000:]
    assert ("deferring to the triggerer" in out) is defers
    wait_until(lambda: not list_jobs(api, namespace), 60, what="job deleted")

"""``kubectl`` users read a training's latest progress line on its Volcano Job: with
``[volcano_wandb] progress_annotation`` on, each line the deferred operator's trigger logs from
the W&B run (the stand-in's, through the real SDK) is written on the job as the annotation
``airflow-volcano-wandb.io/progress``, and the apiserver answers it to a reader while the job
trains (docs/trainer.md). Off by default: the job then carries none.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import threading

import pytest
from kubernetes import client

from airflow_volcano_wandb.wait.training_progress import PROGRESS_ANNOTATION
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, seed_template
from test_support.wandb_support import online_standin_run
from tests.integration.test_progress_on_cluster import LINE, RUN_ID, TRAINS_FOR, training
from tests.integration.test_stall_wandb_on_cluster import logged

pytestmark = pytest.mark.cluster
__all__ = ["training"]  # the fixture, for the tests below

JSONPATH = "jsonpath={.metadata.annotations.airflow-volcano-wandb\\.io/progress}"


def _read_while_it_waits(api, trigger, kubeconfig: str) -> tuple[list[dict], list[str], list]:
    """Run the trigger to its event while reading the job's annotations every 0.5 s, through
    the API and (where installed) ``kubectl get``: the events, the lines logged, the reads."""
    jobs, reads, done = client.CustomObjectsApi(api), [], threading.Event()
    kubectl = shutil.which("kubectl")

    def read() -> None:
        where = ("batch.volcano.sh", "v1alpha1", trigger.namespace, "jobs", trigger.job_name)
        while not done.wait(0.5):
            try:
                job = jobs.get_namespaced_custom_object(*where)
            except client.ApiException:  # not created yet, or deleted on success
                continue
            shown = (job["metadata"].get("annotations") or {}).get(PROGRESS_ANNOTATION)
            argv = [kubectl or "kubectl", "--kubeconfig", kubeconfig, "get", "vcjob"]
            argv += ["-n", trigger.namespace, trigger.job_name, "-o", JSONPATH]
            said = (
                subprocess.run(argv, capture_output=True, text=True) if kubectl and shown else None
            )
            reads.append((shown, said.stdout if said and said.returncode == 0 else None))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    with logged("avw.test.progress.annotation") as (log, lines):
        trigger._log = log
        try:
            events = asyncio.run(support.collect_events(trigger, timeout=120))
        finally:
            done.set()
            reader.join(10)
    return events, lines.lines, reads


def _operator(namespace: str):
    template = seed_template(master={SIM_DURATION: str(TRAINS_FOR)}, worker={SIM_DURATION: "1"})
    return support.operator(
        namespace=namespace,
        template=template,
        deferrable=True,
        **online_standin_run(RUN_ID),
        wandb_summary_keys=["eval/accuracy"],
    )


def test_the_latest_progress_line_is_on_the_job_for_kubectl_with_a_stub_ti(
    cluster, training, monkeypatch, volcano_cluster
):
    api, namespace = cluster
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__PROGRESS_ANNOTATION", "True")
    ti = support.StubTaskInstance("avw_progress_annotation", "train", "on")
    trigger = support.execute_operator(_operator(namespace), ti)
    events, lines, reads = _read_while_it_waits(api, trigger, str(volcano_cluster.kubeconfig))
    assert [event["outcome"] for event in events] == ["succeeded"]
    logged_lines = [line for line in lines if line.startswith("progress: step")]
    shown = [value for value, _ in reads if value]
    # The job showed the lines the task log got, in order, at least two of them, rising.
    distinct = list(dict.fromkeys(shown))
    assert len(distinct) >= 2 and any(LINE.match(value) for value in distinct), reads  # an ETA
    assert all(value in logged_lines for value in distinct), (distinct, logged_lines)
    assert [line for line in logged_lines if line in distinct] == distinct
    # kubectl get (the docs' command) reads what the API answers; every machine here has it.
    assert shutil.which("kubectl"), "kubectl is not on PATH: docs/trainer.md's command is untried"
    said = [(value, out) for value, out in reads if value and out is not None]
    assert said and all(out in logged_lines for _, out in said), said


def test_off_by_default_the_job_carries_no_progress_with_a_stub_ti(
    cluster, training, volcano_cluster
):
    api, namespace = cluster
    ti = support.StubTaskInstance("avw_progress_annotation", "train", "off")
    trigger = support.execute_operator(_operator(namespace), ti)
    events, lines, reads = _read_while_it_waits(api, trigger, str(volcano_cluster.kubeconfig))
    assert [event["outcome"] for event in events] == ["succeeded"]
    assert len([line for line in lines if line.startswith("progress: step")]) >= 2
    assert reads and not any(value for value, _ in reads), reads

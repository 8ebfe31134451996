"""A placed rank whose container can never start fails the task under the defaults, and its
job is deleted so every rank releases its GPUs (``startup_timeout``, ``wait/startup.py``).

On the local cluster KWOK plays the kubelet (``testing/cluster/stages/pods.yaml``): a pod
annotated ``image-pull: <reason>`` is placed on its node and its containers wait with that
reason, as a kubelet's do for an image it cannot pull; a container whose required
``secretKeyRef`` does not resolve waits with ``CreateContainerConfigError`` (the cluster's
``secret_refs``). None of these jobs has a ``pending_timeout`` or a crash loop: before the
startup budget each of them waited until its ``execution_timeout``.
"""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta

import pytest

from airflow_volcano_wandb.exceptions import ContainerConfigError, ImagePullError
from test_support import operator_tries as support
from test_support.cluster_jobs import SIM_DURATION, list_jobs, seed_template, submit_job, wait_until

pytestmark = pytest.mark.cluster

DAG_ID = "avw_startup_budget"
IMAGE_PULL = "sim.airflow-volcano-wandb.io/image-pull"
IMAGE = "example.org/avw/trainer:test"  # support.operator's image_uri


def _placed_for(error: Exception) -> float:
    found = re.search(r"failing for (\d+)s", str(error))
    assert found, error
    return float(found.group(1))


def test_an_image_that_can_never_be_pulled_fails_the_deferred_task_at_once_with_a_stub_ti(
    cluster,
):
    # InvalidImageName cannot heal: the budget (10 minutes here) is not waited out.
    api, namespace = cluster
    template = seed_template(
        master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600", IMAGE_PULL: "InvalidImageName"}
    )
    op = support.operator(
        namespace=namespace, template=template, deferrable=True, startup_timeout=600
    )
    ti = support.StubTaskInstance(DAG_ID, "train", "never")
    trigger = support.execute_operator(op, ti)
    assert trigger.serialize()[1]["startup_timeout"] == 600
    events = asyncio.run(support.collect_events(trigger, timeout=90))
    assert [event["outcome"] for event in events] == ["start_failed"]
    with pytest.raises(ImagePullError) as failure:
        op.execute_complete(support.context_for(ti), events[0], run=None)
    error = failure.value
    assert (error.task, error.reason, error.image) == ("worker", "InvalidImageName", IMAGE)
    assert error.pod.endswith("-worker-0") and error.resume_cause == "not_started"
    assert f"with image {IMAGE} cannot start: InvalidImageName" in str(error), error
    assert "cannot retry its way out" in str(error)
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_an_image_pull_back_off_fails_the_sync_wait_after_the_startup_timeout_with_a_stub_ti(
    cluster,
):
    api, namespace = cluster
    template = seed_template(
        master={SIM_DURATION: "600", IMAGE_PULL: "ImagePullBackOff"},
        worker={SIM_DURATION: "600"},
    )
    op = support.operator(
        namespace=namespace,
        template=template,
        deferrable=False,
        startup_timeout=6,
        execution_timeout=timedelta(seconds=150),  # without the budget: JobTimeoutError
    )
    with pytest.raises(ImagePullError) as failure:
        support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "backoff"))
    error = failure.value
    assert (error.task, error.reason, error.image) == ("master", "ImagePullBackOff", IMAGE)
    assert "startup_timeout=6s" in str(error) and "Back-off pulling image" in str(error)
    assert _placed_for(error) >= 6  # a registry blip had its budget to heal
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_a_missing_secret_fails_with_container_config_error_with_a_stub_ti(cluster):
    api, namespace = cluster
    template = seed_template(master={SIM_DURATION: "600"}, worker={SIM_DURATION: "600"})
    worker = next(t for t in template["spec"]["tasks"] if t["name"] == "worker")
    worker["template"]["spec"]["containers"][0].setdefault("env", []).append(
        {
            "name": "DATA_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "data-token", "key": "token"}},
        }
    )
    op = support.operator(
        namespace=namespace,
        template=template,
        allowed_secrets=["data-token"],
        startup_timeout=4,
        execution_timeout=timedelta(seconds=150),
    )
    with pytest.raises(ContainerConfigError) as failure:
        support.execute_operator(op, support.StubTaskInstance(DAG_ID, "train", "config"))
    error = failure.value
    assert (error.task, error.reason) == ("worker", "CreateContainerConfigError")
    assert 'secret "data-token" not found' in str(error), error
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")


def test_the_poking_sensor_applies_the_same_budget_with_a_stub_ti(cluster):
    api, namespace = cluster
    job = submit_job(
        api,
        namespace,
        "sensed",
        master_seconds=600,
        master_annotations={IMAGE_PULL: "ErrImagePull"},
    )
    with pytest.raises(ImagePullError) as failure:
        support.poke_until_verdict(job, namespace, DAG_ID, timeout=120, startup_timeout=3)
    assert (failure.value.task, failure.value.reason) == ("master", "ErrImagePull")
    assert failure.value.image == "example.org/trainer:1"
    wait_until(lambda: not list_jobs(api, namespace), timeout=60, what="the job deleted")

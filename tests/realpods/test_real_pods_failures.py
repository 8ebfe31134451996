"""Trials on real pods: a trainer that hangs and a worker whose image cannot start fail the
task with the error that names them, and the job is deleted.

Marked ``real_pods``: deselected unless ``-m`` names it (``make test-real-pods``), since the
cluster must be started with the real node (``AVW_CLUSTER_REAL_NODE=1``; root, containerd).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, TypeVar

import pytest

from airflow_volcano_wandb.exceptions import ImagePullError, TrainingStalledError
from airflow_volcano_wandb.testing.cluster import image
from test_support import operator_tries as support
from test_support.cluster_jobs import list_jobs, wait_until
from test_support.real_pods import gang_of_two

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.real_pods,
    pytest.mark.usefixtures("airflow_db", "kubernetes_connection", "real_node", "quick_pod_checks"),
]
E = TypeVar("E", bound=Exception)


def _failure(
    expected: type[E], cluster: Any, template: dict[str, Any], namespace: str, **options: Any
) -> E:
    """Run the operator (sync wait) on ``template`` until it fails with ``expected``; return
    that error once the job is deleted. ``options`` add to or replace the operator's."""
    options = {"allowed_images": [image.TRAINER_IMAGE], **options}
    op = support.operator(namespace=namespace, template=template, deferrable=False, **options)
    with pytest.raises(expected) as failure:
        support.execute_operator(op, support.StubTaskInstance("avw_real_fail", "train", "r1"))
    api = cluster.api_client()
    wait_until(lambda: not list_jobs(api, namespace), 120, what="the job deleted")
    return failure.value


#: Seconds of silence that make a stall here: the kubelet's real log, read with sinceSeconds.
STALL_TIMEOUT = 8


def test_a_trainer_that_hangs_on_real_pods_is_failed_by_stall_timeout_with_a_stub_ti(
    volcano_cluster,
    volcano_namespace,
):
    """A hung collective, for real: every rank prints its start, then blocks. The kubelet's
    own log of the master answers the ``sinceSeconds`` probe with nothing, the task fails with
    ``TrainingStalledError`` naming each rank's last line, and the job is deleted."""
    script = (
        "import socket, sys, time\n"
        "print(f'step 1 on {socket.gethostname()}', flush=True)\n"
        "time.sleep(900)  # blocked, as in a collective whose peer never comes\n"
    )
    template = gang_of_two("hang", volcano_namespace, script)
    error = _failure(
        TrainingStalledError,
        volcano_cluster,
        template,
        volcano_namespace,
        stall_timeout=STALL_TIMEOUT,
        execution_timeout=timedelta(seconds=240),
    )
    assert error.task == "master" and error.running_for >= STALL_TIMEOUT, error
    text = str(error)
    assert f"no log line for at least {STALL_TIMEOUT}s" in text, text
    assert "[master-0] step 1 on " in text and "[worker-0] step 1 on " in text, text


@pytest.mark.parametrize(
    ("bad_image", "reasons", "startup_timeout"),
    [
        # Nothing listens there: containerd's pull fails, the kubelet backs off (may heal).
        ("127.0.0.1:9/avw/no-such-trainer:1", ("ErrImagePull", "ImagePullBackOff"), 20),
        # No image reference at all: the kubelet never tries (fails at once).
        ("Not/An Image:1", ("InvalidImageName",), 600),
    ],
    ids=["unreachable-registry", "invalid-name"],
)
def test_a_worker_whose_image_cannot_start_on_real_pods_fails_and_frees_the_gang_with_a_stub_ti(
    volcano_cluster,
    volcano_namespace,
    bad_image,
    reasons,
    startup_timeout,
):
    """#33 on a real kubelet: the master starts and holds its slot, the worker's image cannot
    be had. Under the defaults (no pending_timeout) the task fails with ``ImagePullError``
    naming the worker's pod, its image and the kubelet's words, and the job is deleted."""
    template = gang_of_two("badimage", volcano_namespace, "import time; time.sleep(900)")
    worker = next(task for task in template["spec"]["tasks"] if task["name"] == "worker")
    worker["template"]["spec"]["containers"][0]["image"] = bad_image
    error = _failure(
        ImagePullError,
        volcano_cluster,
        template,
        volcano_namespace,
        allowed_images=[image.TRAINER_IMAGE, bad_image],
        startup_timeout=startup_timeout,
        execution_timeout=timedelta(seconds=300),
    )
    assert error.task == "worker" and error.reason in reasons, error
    assert error.image == bad_image and f"with image {bad_image}" in str(error), error

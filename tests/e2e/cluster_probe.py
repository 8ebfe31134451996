"""What the end-to-end test reads from, and does to, the local Volcano cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client

VOLCANO_GROUP = "batch.volcano.sh"
VOLCANO_VERSION = "v1alpha1"
TIMEOUT = 30  # seconds for any one Kubernetes API call


def get_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        VOLCANO_GROUP, VOLCANO_VERSION, namespace, "jobs", name, _request_timeout=TIMEOUT
    )


def pod_env(pod: client.V1Pod) -> dict[str, str]:
    """The literal env values of the pod's first container."""
    return {e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None}


@contextlib.contextmanager
def nodes_cordoned(api: client.ApiClient) -> Iterator[Callable[[], None]]:
    """Cordon every schedulable node; uncordon them on exit (or earlier via ``release``).

    The test holds the job's pods ``Pending`` this way, so that the sensor finds the job
    running (not already ``Completed``: a simulated pod runs 2 s) and has to defer. It
    touches only nodes this context cordoned, and always restores them.
    """
    core = client.CoreV1Api(api)
    cordoned = [
        node.metadata.name
        for node in core.list_node(_request_timeout=TIMEOUT).items
        if not node.spec.unschedulable
    ]
    released = False

    def release() -> None:
        nonlocal released
        if not released:
            for name in cordoned:
                core.patch_node(name, {"spec": {"unschedulable": None}}, _request_timeout=TIMEOUT)
            released = True

    try:
        for name in cordoned:
            core.patch_node(name, {"spec": {"unschedulable": True}}, _request_timeout=TIMEOUT)
        yield release
    finally:
        release()

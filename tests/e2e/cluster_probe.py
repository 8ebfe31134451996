"""What the end-to-end test reads from, and does to, the local Volcano cluster."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import Any

from kubernetes import client, watch

VOLCANO_GROUP = "batch.volcano.sh"
VOLCANO_VERSION = "v1alpha1"
TASK_LABEL = "volcano.sh/task-spec"
TIMEOUT = 30  # seconds for any one Kubernetes API call


def get_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(
        VOLCANO_GROUP, VOLCANO_VERSION, namespace, "jobs", name, _request_timeout=TIMEOUT
    )


class PodRecorder:
    """Watch the pods of one namespace in a thread and keep the last seen version of each.

    Volcano deletes a completed job's running pods, and the simulated pods live for seconds,
    so a list at the end could miss some: a watch sees every pod that ever existed.
    """

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self._core = client.CoreV1Api(api)
        self._namespace = namespace
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.pods: dict[str, client.V1Pod] = {}
        self.error: BaseException | None = None
        initial = self._core.list_namespaced_pod(namespace, _request_timeout=TIMEOUT)
        for pod in initial.items:
            self.pods[pod.metadata.name] = pod
        self._resource_version = initial.metadata.resource_version
        self._thread = threading.Thread(target=self._run, name="e2e-pod-recorder", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for event in self._watch.stream(
                    self._core.list_namespaced_pod,
                    self._namespace,
                    resource_version=self._resource_version,
                    timeout_seconds=5,
                    _request_timeout=TIMEOUT,
                ):
                    pod = event["object"]
                    self._resource_version = pod.metadata.resource_version
                    with self._lock:
                        self.pods[pod.metadata.name] = pod
                    if self._stop.is_set():
                        break
        except BaseException as err:  # reported by the test, never swallowed
            if not self._stop.is_set():
                self.error = err

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        self._thread.join(timeout=10)

    def by_task(self) -> dict[str, list[client.V1Pod]]:
        with self._lock:
            pods = list(self.pods.values())
        tasks: dict[str, list[client.V1Pod]] = {}
        for pod in pods:
            task = (pod.metadata.labels or {}).get(TASK_LABEL, "?")
            tasks.setdefault(task, []).append(pod)
        return tasks


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

"""Record the pods or Volcano jobs of a namespace while something runs, as last seen.

For reports and end-to-end tests: a list at the end would miss what was deleted meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from kubernetes import client, watch

VOLCANO_GROUP = "batch.volcano.sh"
VOLCANO_VERSION = "v1alpha1"
TASK_LABEL = "volcano.sh/task-spec"
TIMEOUT = 30  # seconds for any one Kubernetes API call


class Recorder:
    """Watch one kind of object in a namespace in a thread; keep the last version of each.

    Volcano deletes a completed job's running pods, the simulated pods live for seconds, and
    the sensor deletes the completed job: a list at the end could miss them, a watch sees
    every object that existed while it ran (objects stay recorded after their deletion).
    """

    def __init__(self, list_call: Callable[..., Any], *args: Any) -> None:
        self._list_call, self._args = list_call, args
        self._watch = watch.Watch()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.objects: dict[str, Any] = {}
        self.error: BaseException | None = None
        initial = list_call(*args, _request_timeout=TIMEOUT)
        for obj in _items(initial):
            self.objects[_name(obj)] = obj
        self._resource_version = _list_version(initial)
        self._thread = threading.Thread(target=self._run, name="e2e-recorder", daemon=True)
        self._thread.start()

    @classmethod
    def pods(cls, api: client.ApiClient, namespace: str) -> Recorder:
        return cls(client.CoreV1Api(api).list_namespaced_pod, namespace)

    @classmethod
    def jobs(cls, api: client.ApiClient, namespace: str) -> Recorder:
        return cls(
            client.CustomObjectsApi(api).list_namespaced_custom_object,
            VOLCANO_GROUP,
            VOLCANO_VERSION,
            namespace,
            "jobs",
        )

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                for event in self._watch.stream(
                    self._list_call,
                    *self._args,
                    resource_version=self._resource_version,
                    timeout_seconds=5,
                    _request_timeout=TIMEOUT,
                ):
                    obj = event["object"]
                    self._resource_version = _version(obj)
                    if event["type"] != "DELETED":
                        with self._lock:
                            self.objects[_name(obj)] = obj
                    if self._stop.is_set():
                        break
        except BaseException as err:  # reported by the test, never swallowed
            if not self._stop.is_set():
                self.error = err

    def stop(self) -> None:
        self._stop.set()
        self._watch.stop()
        self._thread.join(timeout=10)

    def last_seen(self, name: str) -> Any:
        with self._lock:
            return self.objects.get(name)

    def seen(self) -> list[Any]:
        """Every object recorded, as last seen."""
        with self._lock:
            return list(self.objects.values())

    def by_task(self) -> dict[str, list[Any]]:
        """Pods by their Volcano task (for a pod recorder)."""
        tasks: dict[str, list[Any]] = {}
        for pod in self.seen():
            task = (pod.metadata.labels or {}).get(TASK_LABEL, "?")
            tasks.setdefault(task, []).append(pod)
        return tasks

    def __enter__(self) -> Recorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _items(listed: Any) -> list[Any]:
    return listed["items"] if isinstance(listed, dict) else listed.items


def _list_version(listed: Any) -> str:
    return (
        listed["metadata"]["resourceVersion"]
        if isinstance(listed, dict)
        else (listed.metadata.resource_version)
    )


def _name(obj: Any) -> str:
    return obj["metadata"]["name"] if isinstance(obj, dict) else obj.metadata.name


def _version(obj: Any) -> str:
    return (
        obj["metadata"]["resourceVersion"]
        if isinstance(obj, dict)
        else (obj.metadata.resource_version)
    )

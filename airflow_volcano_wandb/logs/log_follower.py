"""Follow the master pod's log into the task log while a sync-mode task waits."""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any

from airflow_volcano_wandb.airflow_compat import redact
from airflow_volcano_wandb.hooks.volcano import VolcanoHook
from airflow_volcano_wandb.logs.log_lines import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    LineJoiner,
    LogCap,
)
from airflow_volcano_wandb.template import master_task_name
from airflow_volcano_wandb.wait.diagnostics import task_of

STARTED_PHASES = ("Running", "Succeeded", "Failed")


class MasterLogFollower(threading.Thread):
    """Streams one pod's log, each line once, until ``stop()``.

    The log is a courtesy: any error just ends the stream, the wait decides the outcome.
    Lines split across chunks are joined (``log_lines``), and at most ``max_lines`` lines or
    ``max_bytes`` bytes are shown, as in the deferred follow.
    ``stop()`` shuts the HTTP response's socket down, because a follow stream only returns
    when a line arrives or the container ends, and the task must not wait on either.
    """

    def __init__(
        self,
        hook: VolcanoHook,
        job_name: str,
        namespace: str,
        master_task: str,
        log: logging.Logger | Any,
        max_lines: int = DEFAULT_MAX_LINES,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        super().__init__(name=f"log-{job_name}", daemon=True)
        self._hook = hook
        self._job_name = job_name
        self._namespace = namespace
        self._master_task = master_task
        self._log = log
        self._stopped = threading.Event()
        self._response: Any = None
        self._cap = LogCap(max_lines, max_bytes)

    @classmethod
    def for_job(
        cls, hook: VolcanoHook, job: dict, log: logging.Logger | Any, max_lines: int, max_bytes: int
    ) -> MasterLogFollower:
        """A follower of ``job``'s master task (as the template names it)."""
        meta = job["metadata"]
        master = master_task_name(job) or ""
        return cls(hook, meta["name"], meta["namespace"], master, log, max_lines, max_bytes)

    def stop(self) -> None:
        self._stopped.set()
        response = self._response
        if response is not None:
            # Not close(): from this thread it waits for the reader's buffer lock, that is
            # for the next log line (a minute of silence cost the task a minute). Shutting the
            # socket down wakes the blocked read at once.
            with contextlib.suppress(Exception):
                response.shutdown()
        self.join(timeout=2)
        if response is not None:
            with contextlib.suppress(Exception):
                response.close()

    def run(self) -> None:
        while not self._stopped.is_set():
            try:
                pod = self._started_master_pod()
                if pod:
                    self._follow(pod)
                    return
            except Exception as exc:
                if self._stopped.is_set():
                    return
                self._log.debug("Master log not available yet: %s", exc)
            self._stopped.wait(2)

    def _started_master_pod(self) -> str | None:
        for pod in self._hook.list_job_pods(self._job_name, self._namespace):
            if (
                task_of(pod) == self._master_task
                and (pod.get("status") or {}).get("phase") in STARTED_PHASES
            ):
                return pod["metadata"]["name"]
        return None

    def _follow(self, pod: str) -> None:
        self._response = self._hook.core_v1_client.read_namespaced_pod_log(
            pod, self._namespace, follow=True, _preload_content=False
        )
        joiner = LineJoiner()
        for raw in self._response.stream():
            if not self._show(pod, joiner.feed(raw)) or self._stopped.is_set():
                return
        self._show(pod, joiner.flush())

    def _show(self, pod: str, lines: list[str]) -> bool:
        """Log the lines the cap admits; False once it is reached."""
        for line in lines:
            shown, notice = self._cap.admit(line)
            if shown:
                # Masked here, as job_report's tails are: a trainer may print its env, and
                # task log records also reach the supervisor's stdout, outside the masked file.
                self._log.info("[%s] %s", pod, redact(line))
            elif notice:
                self._log.info("[%s] %s", pod, notice)
        return not self._cap.reached

"""A real Airflow for the reliability tests, and DAG runs followed through its REST API.

``running_stack`` starts the e2e stack (``tests/e2e/airflow_stack``) shaped for high
availability, as a production deployment runs it: PostgreSQL, the API server, two schedulers,
the DAG processor and two triggerers, on the shared local cluster, with the executor that
``EXECUTOR`` names (``tests/e2e/executors.py``: LocalExecutor, or CeleryExecutor with Redis
and two Celery workers);
``start_run`` triggers a DAG with its job in a namespace of its own, which ``Watched`` polls in
the background.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from kubernetes import client

from test_support.apiserver_audit import kubeconfig_as
from test_support.cluster_jobs import list_jobs
from tests.e2e.airflow_stack import REPO, AirflowStack, ApiError, wait_for
from tests.e2e.executors import executor_from_env

DAGS = REPO / "tests" / "reliability" / "dags"
ARTIFACTS = REPO / "test-artifacts" / "reliability"
WANDB_CONN = {
    "conn_type": "wandb",
    "password": "avw-test-key-0123456789abcdef0123456789abcdef0123",
    "extra": {"entity": "test-entity", "project": "test-project"},
}
ENDED = ("failed", "success", "skipped", "upstream_failed", "up_for_retry")


@dataclass
class Watched:
    """A namespace polled in the background: when did it last become empty of jobs and pods?"""

    api: Any
    namespace: str
    seen: set[str] = field(default_factory=set)  # job uids ever seen
    emptied_at: float | None = None  # wall clock, after something had been there
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Watched:
        threading.Thread(target=self._poll, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _poll(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            try:
                jobs = list_jobs(self.api, self.namespace)
                pods = core.list_namespaced_pod(self.namespace).items
            except Exception:
                time.sleep(0.5)
                continue
            self.seen |= {j["metadata"]["uid"] for j in jobs}
            if jobs or pods:
                self.emptied_at = None
            elif self.seen and self.emptied_at is None:
                self.emptied_at = time.time()
            time.sleep(0.3)

    def jobs(self) -> list[dict[str, Any]]:
        return list_jobs(self.api, self.namespace)

    def live_uids(self) -> list[str]:
        return [j["metadata"]["uid"] for j in self.jobs()]


@dataclass
class Run:
    stack: AirflowStack
    dag_id: str
    run_id: str
    watched: Watched
    task_id: str = "train"

    @property
    def run_path(self) -> str:
        return f"/dags/{self.dag_id}/dagRuns/{quote(self.run_id, safe='')}"

    @property
    def ti_path(self) -> str:
        return self.ti_path_of(self.task_id)

    def ti_path_of(self, task_id: str) -> str:
        return f"{self.run_path}/taskInstances/{task_id}"

    def ti(self, task_id: str | None = None) -> dict[str, Any]:
        return self.stack.api("GET", self.ti_path_of(task_id or self.task_id))

    def dag_run(self) -> dict[str, Any]:
        return self.stack.api("GET", self.run_path)

    def xcom(self, key: str, task_id: str | None = None) -> Any:
        path = f"{self.ti_path_of(task_id or self.task_id)}/xcomEntries/{key}"
        return self.stack.api("GET", path)["value"]

    def state_store(self, key: str, task_id: str | None = None) -> Any:
        """A value of the task instance's Airflow 3.3 task state store."""
        path = f"{self.ti_path_of(task_id or self.task_id)}/state-store/{key}"
        return self.stack.api("GET", path)["value"]

    def clear(self, task_ids: list[str] | None = None, **options: Any) -> None:
        """Clear task instances of this run through the REST API (their next try starts)."""
        self.stack.clear(self.dag_id, self.run_id, task_ids or [self.task_id], **options)

    def task_log(self, try_number: int, task_id: str | None = None, lines: int = 60) -> str:
        """The last ``lines`` of a try's task log, as the REST API serves it (for failures)."""
        try:
            body = self.stack.api(
                "GET",
                f"{self.ti_path_of(task_id or self.task_id)}/logs/{try_number}",
                params={"full_content": "true"},
                headers={"Accept": "application/json"},
            )
        except (ApiError, httpx.HTTPError) as err:
            return f"(no task log: {err})"
        content = body.get("content") if isinstance(body, dict) else body
        if isinstance(content, str):
            return "\n".join(content.splitlines()[-lines:])
        rendered = [
            " ".join(str(e.get(k, "")) for k in ("timestamp", "level", "event"))
            if isinstance(e, dict)
            else str(e)
            for e in content or ()
        ]
        return "\n".join(rendered[-lines:])

    def expect_success(self, try_number: int = 1, task_id: str | None = None) -> dict[str, Any]:
        """Wait for try ``try_number`` to end; fail with its task log unless it succeeded."""
        ti = self.wait_ended(task_id, try_number=try_number)
        if (ti["state"], ti["try_number"]) != ("success", try_number):
            log = self.task_log(ti["try_number"], task_id)
            raise AssertionError(
                f"{self.dag_id} {task_id or self.task_id} try {ti['try_number']} ended "
                f"{ti['state']}, expected success on try {try_number}; its log ends:\n{log}"
            )
        return ti

    def wait_run_ended(self, timeout: float = 120) -> dict[str, Any]:
        """The DAG run once the scheduler has marked it ended.

        Clear a finished run only then: a clear that lands while the scheduler is marking the
        run successful is overwritten by it (the run ends ``success`` with its task instances
        reset, and nothing runs again).
        """

        def ended():
            run = self.dag_run()
            return run if run["state"] in ("success", "failed") else None

        return wait_for(ended, timeout, f"{self.dag_id} run {self.run_id} to end", interval=1)

    def wait_deferred(self, timeout: float = 300) -> dict[str, Any]:
        def deferred():
            self.stack.check_alive()
            ti = self.ti()
            if ti["state"] in ENDED:
                raise AssertionError(f"{self.dag_id}: task ended {ti['state']} before deferring")
            return ti if ti["state"] == "deferred" and self.watched.live_uids() else None

        return wait_for(deferred, timeout, f"{self.dag_id} to defer", interval=1)

    def wait_ended(
        self, task_id: str | None = None, try_number: int = 1, timeout: float = 400
    ) -> dict[str, Any]:
        """The task instance once its try ``try_number`` has ended."""

        def ended():
            self.stack.check_alive()
            ti = self.ti(task_id)
            return ti if ti["state"] in ENDED and ti["try_number"] >= try_number else None

        return wait_for(ended, timeout, f"{self.dag_id} try {try_number} to end", interval=1)


MANUAL_DAG = "volcano_pytorch_manual"
#: Deferred jobs of the handover trial (tests/reliability/test_ha_airflow.py): 4 in the
#: default suite, 20 in ``make test-ha``.
HANDOVER_JOBS = int(os.environ.get("AVW_HANDOVER_JOBS", "4"))
#: A triggerer whose heartbeat is older than this loses its triggers to a healthy one (the
#: default is 30 s; the handover trial freezes one past it).
TRIGGERER_HEALTH_CHECK_THRESHOLD = 15
#: Each triggerer talks to the apiserver as a user of its own (a client certificate of the
#: local cluster's CA, in ``system:masters`` like the admin), so the apiserver's audit log
#: tells their requests apart (trial 4, ``test_ha_watch_load.py``).
TRIGGERER_USERS = {"triggerer": "avw-ha-triggerer-a", "triggerer-2": "avw-ha-triggerer-b"}


class ReliabilityStack(AirflowStack):
    """The e2e stack, patient with DAG imports on a busy 2-core machine."""

    def env(self) -> dict[str, str]:
        env = super().env()
        env["AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT"] = "300"
        env["AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT"] = "300"
        # The task's first call (PATCH .../run) timed out at the default 5 s on a loaded
        # machine; its retry then met the applied first one and the try failed unstarted.
        env["AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT"] = "60"
        return env


def ha_stack(
    triggerer_kubeconfigs: dict[str, Path] | None = None, **kwargs: Any
) -> ReliabilityStack:
    """Two schedulers and two triggerers, the way an HA deployment runs them.

    The first triggerer takes at most half of the handover trial's jobs (its capacity), so
    the trial can place half on each; the second keeps Airflow's default capacity, so it can
    take all of them over. ``triggerer_kubeconfigs`` gives a triggerer a kubeconfig of its own
    (``kubernetes_default`` there), by component name.
    """
    component_env: dict[str, dict[str, str]] = {
        "triggerer": {"AIRFLOW__TRIGGERER__CAPACITY": str(HANDOVER_JOBS // 2)}
    }
    for component, kubeconfig in (triggerer_kubeconfigs or {}).items():
        conn = {"conn_type": "kubernetes", "extra": {"kube_config_path": str(kubeconfig)}}
        component_env.setdefault(component, {})["AIRFLOW_CONN_KUBERNETES_DEFAULT"] = json.dumps(
            conn
        )
    ha_env = {
        "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": str(
            TRIGGERER_HEALTH_CHECK_THRESHOLD
        ),
        # Two schedulers share two cores: two task processes each under LocalExecutor, two
        # queued or running tasks each under Celery (two workers of two slots run them).
        "AIRFLOW__CORE__PARALLELISM": "2",
        # A deferred task counts as active: 16 (the defaults) left 4 of 20 handover runs unstarted.
        "AIRFLOW__CORE__MAX_ACTIVE_RUNS_PER_DAG": "64",
        "AIRFLOW__CORE__MAX_ACTIVE_TASKS_PER_DAG": "64",
    }
    return ReliabilityStack(
        schedulers=2,
        triggerers=2,
        component_env=component_env,
        **{**kwargs, "extra_env": {**ha_env, **kwargs.get("extra_env", {})}},
    )


def triggerer_kubeconfigs(volcano_cluster, folder: Path) -> dict[str, Path]:
    """A kubeconfig for each triggerer, as its user of ``TRIGGERER_USERS``; none when the
    cluster's CA key is not at hand (then both are the admin, and trial 4 fails)."""
    pki = Path(volcano_cluster.state_dir) / "pki"
    if not (pki / "ca.key").exists():
        return {}
    return {
        component: kubeconfig_as(
            volcano_cluster.kubeconfig, pki, user, folder / f"{component}.kubeconfig"
        )
        for component, user in TRIGGERER_USERS.items()
    }


def _raise_on_sigterm(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def started(stack: AirflowStack, home: Path, timeout: float) -> Iterator[AirflowStack]:
    """Start ``stack``; on the way out, stop it and remove ``home``: after a SIGTERM too (a CI
    timeout, say), which raises here instead of killing the process before its teardowns."""
    previous = signal.signal(signal.SIGTERM, _raise_on_sigterm)
    try:
        stack.start(timeout=timeout)
        yield stack
    finally:
        try:
            stack.stop()
            shutil.rmtree(home, ignore_errors=True)
        finally:
            signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def running_stack(
    volcano_cluster,
    name: str,
    dags_folder: Path = DAGS,
    manual_namespace: str | None = None,
    *,
    executor: str | None = None,
    wandb_conn: dict[str, Any] | None = None,
    extra_env: dict[str, str] | None = None,
) -> Iterator[AirflowStack]:
    """A real Airflow on the shared cluster; its logs under test-artifacts/reliability/NAME.
    ``executor``: ``local`` or ``celery`` (by default what ``EXECUTOR`` says)."""
    home = Path(tempfile.mkdtemp(prefix="avw-rel-airflow-"))
    log_dir = ARTIFACTS / name
    shutil.rmtree(log_dir, ignore_errors=True)
    stack = ha_stack(
        triggerer_kubeconfigs=triggerer_kubeconfigs(volcano_cluster, home),
        home=home,
        log_dir=log_dir,
        kubeconfig=volcano_cluster.kubeconfig,
        wandb_conn=wandb_conn or WANDB_CONN,
        dags_folder=dags_folder,
        executor=executor or executor_from_env(),
        extra_env={
            # The manual DAG's form accepts only the deployment's namespaces (dags/ docstring).
            **(
                {"AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES": manual_namespace}
                if manual_namespace
                else {}
            ),
            # The online runs' progress read every 15 s, not 60: a 2 min training shows several
            # lines from the triggerer (test_progress_airflow.py). Offline runs are never read.
            "AIRFLOW__VOLCANO_WANDB__PROGRESS_INTERVAL": "15",
            **(extra_env or {}),
        },
    )
    stack.manual_namespace = manual_namespace
    # A loaded 2-core machine: the DB migration alone took >5 min.
    with started(stack, home, timeout=900):
        yield stack


def start_run(
    stack: AirflowStack,
    volcano_cluster,
    api,
    dag_id: str,
    case: str,
    conf: dict[str, Any],
    *,
    namespace_key: str = "namespace",
    task_id: str = "train",
) -> Run:
    """Trigger ``dag_id`` for ``case`` with its job in a namespace of its own, watched."""
    wait_for(lambda: stack.api("GET", f"/dags/{dag_id}"), 240, f"DAG {dag_id}")
    stack.api("PATCH", f"/dags/{dag_id}", json={"is_paused": False})
    namespace = getattr(stack, "manual_namespace", None) if dag_id == MANUAL_DAG else None
    namespace = namespace or volcano_cluster.create_namespace(case.replace("_", "-")[:30])
    run_id = f"{case}-{uuid.uuid4().hex[:6]}"
    stack.trigger(dag_id, run_id, {**conf, namespace_key: namespace})
    return Run(stack, dag_id, run_id, Watched(api, namespace).start(), task_id=task_id)

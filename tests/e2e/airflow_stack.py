"""A real Airflow 3 for the end-to-end and reliability tests, shaped like a production one: a
PostgreSQL metadata DB (``tests/e2e/postgres.py``), the API server, one or more schedulers,
the DAG processor and one or more triggerers, and under CeleryExecutor a Redis broker
(``tests/e2e/redis_server.py``) and Celery workers (``tests/e2e/executors.py``), each a child
process with its own process group, in a private AIRFLOW_HOME. The provider is imported as
installed (the venv's package and its entry points), never from the checkout.

Nothing here is shared with the in-process tests' Airflow (``tests/conftest.py`` points
``AIRFLOW_HOME`` at a temp dir of its own, with SQLite for ``dag.test()``): every ``AIRFLOW*``
variable of the pytest process is dropped from the children's environment and replaced by
this stack's own.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx

from airflow_volcano_wandb.testing.cluster.process import free_ports
from tests.e2e import executors, process_tree
from tests.e2e.airflow_api import ApiError, RestApi
from tests.e2e.postgres import PostgresServer
from tests.e2e.redis_server import RedisServer

REPO = Path(__file__).resolve().parents[2]
HOST_MODULE, HOST_ENV = "avw_stack_host", "AVW_STACK_HOST"

T = TypeVar("T")


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM this process when the test process dies.

    Every component runs in its own process group (so ``stop()`` can end its children too),
    which also shields it from a Ctrl-C or a CI runner's signal to the test's group; this
    way a killed test run does not leave an Airflow running.
    """
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def component_names(schedulers: int = 1, triggerers: int = 1, workers: int = 0) -> tuple[str, ...]:
    """The components of a stack: the second scheduler is ``scheduler-2``, and so on; Celery
    workers come with ``log-routes``, the network to their and the triggerers' log servers."""

    def numbered(command: str, count: int) -> list[str]:
        return [command if n == 1 else f"{command}-{n}" for n in range(1, count + 1)]

    return (
        "api-server",
        *numbered("scheduler", schedulers),
        "dag-processor",
        *numbered("triggerer", triggerers),
        *numbered("worker", workers),
        *(["log-routes"] if workers else []),
    )


def command_of(component: str) -> str:
    """The ``airflow`` command a component runs (``triggerer-2`` runs ``triggerer``)."""
    return re.sub(r"-\d+$", "", component)


def wait_for(probe: Callable[[], T | None], timeout: float, what: str, interval: float = 1.0) -> T:
    """Call ``probe`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            value = probe()
            if value:
                return value
        except (httpx.HTTPError, OSError, ValueError, KeyError, ApiError) as err:
            last_error = err
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what}{detail}")
        time.sleep(interval)


@dataclass
class AirflowStack(RestApi):
    """Airflow's components as child processes; ``stop()`` ends every one of them."""

    home: Path
    log_dir: Path
    kubeconfig: Path
    wandb_conn: dict[str, Any]
    dags_folder: Path = REPO / "dags"
    #: More environment for every component (e.g. the manual DAG's allow-list, log levels).
    extra_env: dict[str, str] = field(default_factory=dict)
    #: More environment for one component (e.g. ``{"triggerer": {...}}``).
    component_env: dict[str, dict[str, str]] = field(default_factory=dict)
    #: High availability: schedulers and triggerers side by side.
    schedulers: int = 1
    triggerers: int = 1
    #: ``local`` (LocalExecutor: the schedulers run the tasks) or ``celery`` (``workers``
    #: Celery workers run them); see ``tests/e2e/executors.py``.
    executor: str = "local"
    workers: int = 2
    #: The PostgreSQL state dir; by default a temp dir of its own, removed by ``stop()``.
    postgres_dir: Path | None = None
    #: Components outlive this process (``make airflow-up``), their pids in ``home/run``.
    detached: bool = False
    api_port: int = field(init=False)
    _log_ports: dict[str, int] = field(init=False)
    _common_log_ports: dict[str, int] = field(init=False)
    postgres: PostgresServer = field(init=False)
    redis: RedisServer | None = field(init=False, default=None)
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    #: Components stopped on purpose (``kill``) until ``start_again``: not "exited".
    stopped: set[str] = field(default_factory=set)
    #: While :meth:`supervised`: each component that exited and was started again.
    _restarts: list[str] | None = None
    _env: dict[str, str] = field(default_factory=dict)
    _own_postgres_dir: bool = False

    def __post_init__(self) -> None:
        self.celery = self.executor == "celery"
        workers = self.workers if self.celery else 0
        self.components = component_names(self.schedulers, self.triggerers, workers)
        # LocalExecutor: the first scheduler serves its task logs and the first triggerer its
        # trigger logs on the ports every component (the API server too) is told; any further
        # one on a port of its own. CeleryExecutor: every worker and triggerer on a port of its
        # own, which log-routes makes its host's common port. Picked together: all distinct.
        extra = [
            c
            for c in self.components[1:]
            if (executors.serves_logs(command_of(c)) if self.celery else command_of(c) != c)
        ]
        self.api_port, worker_port, trigger_port, *extra_ports = free_ports(3 + len(extra))
        self._log_ports = dict(zip(extra, extra_ports, strict=True))
        self._common_log_ports = {"WORKER": worker_port, "TRIGGER": trigger_port}
        if self.postgres_dir is None:
            self._own_postgres_dir = True
            self.postgres_dir = Path(tempfile.mkdtemp(prefix="avw-postgres-"))
            self.postgres_dir.chmod(0o711)  # PostgreSQL's own user must get through (as root)
        self.postgres = PostgresServer(
            self.postgres_dir / "server", log_dir=self.log_dir, detached=self.detached
        )
        if self.celery:
            self.redis = RedisServer(
                self.home / "redis", log_dir=self.log_dir, detached=self.detached
            )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        env.pop("KUBECONFIG", None)
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "180",
                "AIRFLOW__CORE__EXECUTOR": executors.EXECUTORS[self.executor],
                # Two cores are shared with other work: few task processes, one API worker,
                # one parsing process.
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__CORE__ALLOWED_DESERIALIZATION_CLASSES_REGEXP": "airflow_volcano_wandb.*",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": self.postgres.url(),
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.api_port),
                "AIRFLOW__API__BASE_URL": self.base_url,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.base_url}/execution/",
                "AIRFLOW__API__SECRET_KEY": secrets.token_hex(16),
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                # Task and trigger logs next to the components' logs (kept after the test);
                # under Celery one folder per component (task_log_folder).
                "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(self.task_log_folder("api-server")),
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self._common_log_ports["WORKER"]),
                "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(self._common_log_ports["TRIGGER"]),
                # Each scheduler and triggerer is a host of its own, as in a deployment
                # (host_of): Airflow's jobs and the trigger logs' suffixes tell them apart.
                "AIRFLOW__CORE__HOSTNAME_CALLABLE": f"{HOST_MODULE}.hostname",
                "AIRFLOW_CONN_KUBERNETES_DEFAULT": json.dumps(
                    {"conn_type": "kubernetes", "extra": {"kube_config_path": str(self.kubeconfig)}}
                ),
                "AIRFLOW_CONN_WANDB_DEFAULT": json.dumps(self.wandb_conn),
                # The Airflow's WANDB_MODE is every task's default wandb_mode: offline unless
                # the stack's W&B is the local stand-in (a connection with a host), which
                # answers the provider's reads and writes as W&B would.
                **({} if self.wandb_conn.get("host") else {"WANDB_MODE": "offline"}),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.redis is not None:
            env.update(executors.celery_env(self.redis.url(), self.postgres.url()))
        env.update(self.extra_env)
        return env

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, timeout: float = 240) -> None:
        """Start PostgreSQL, migrate the DB, start the components, wait for the API server."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.postgres.initialize()
        self.postgres.start()
        if self.redis is not None:
            self.redis.start()
        env = self.env()  # once: the secrets must be the same in every component
        # Imported by the components from their cwd (``python -m`` puts it first on sys.path).
        (self.home / f"{HOST_MODULE}.py").write_text(
            "import os\n\n\ndef hostname():\n"
            f"    return os.environ.get({HOST_ENV!r}, '127.0.0.1')\n"
        )
        self._env = env
        with open(self.log_dir / "db-migrate.log", "wb") as log:
            subprocess.run(
                [sys.executable, "-m", "airflow", "db", "migrate"],
                env=env,
                cwd=self.home,
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=timeout,
            )
        for component in self.components:
            self._spawn(component, "wb")
        wait_for(self._api_ready, timeout, "the Airflow API server", interval=1)

    def task_log_folder(self, component: str) -> Path:
        """Where ``component`` writes task and trigger logs: under LocalExecutor one folder
        for all; under CeleryExecutor each its own, as on a machine of its own, so the API
        server's folder never holds a worker's or a triggerer's log."""
        return self.log_dir / "hosts" / component if self.celery else self.log_dir / "tasks"

    def task_log_folders(self) -> list[Path]:
        """Every folder a task or trigger log may be in (the test reads them as a post-mortem
        would; the API server reads only its own and the log servers)."""
        return sorted({self.task_log_folder(c) for c in self.components})

    def host_of(self, component: str) -> str:
        """The host name a component reports to Airflow: a loopback address of its own for
        each scheduler, triggerer and worker (its log server answers there), 127.0.0.1 else."""
        hosts = ("scheduler", "triggerer", "worker")
        numbered = [c for c in self.components if command_of(c) in hosts]
        return f"127.0.0.{2 + numbered.index(component)}" if component in numbered else "127.0.0.1"

    def component_of_job(self, job_id: int) -> str:
        """The scheduler or triggerer component that runs Airflow job ``job_id``."""
        job = next(j for j in self.api("GET", "/jobs")["jobs"] if j["id"] == job_id)
        return next(c for c in self.components if self.host_of(c) == job["hostname"])

    def _log_routes(self) -> list[str]:
        """``host:common port=own port`` of each log server (``tests/e2e/log_routes.py``)."""
        return [
            f"{self.host_of(c)}:{self._common_log_ports[executors.serves_logs(command_of(c))]}"
            f"={port}"
            for c, port in self._log_ports.items()
        ]

    def _spawn(self, component: str, log_mode: str) -> None:
        env = dict(self._env)
        env[HOST_ENV] = self.host_of(component)
        env["AIRFLOW__LOGGING__BASE_LOG_FOLDER"] = str(self.task_log_folder(component))
        if component in self._log_ports:
            kind = "TRIGGER" if command_of(component) == "triggerer" else "WORKER"
            env[f"AIRFLOW__LOGGING__{kind}_LOG_SERVER_PORT"] = str(self._log_ports[component])
        env.update(self.component_env.get(component, {}))
        log = open(self.log_dir / f"{component}.log", log_mode)  # noqa: SIM115 (kept open)
        routes = self._log_routes() if component == "log-routes" else []
        argv = executors.argv_of(component, command_of(component), routes)
        self.procs[component] = proc = subprocess.Popen(
            [sys.executable, *argv],
            env=env,
            # Not the repo: ``python -m`` puts the cwd first on sys.path, and the
            # components must import the provider as installed.
            cwd=self.home,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: stop() ends its children too
            preexec_fn=None if self.detached else _die_with_parent,
        )
        log.close()
        run = self.home / "run"
        run.mkdir(exist_ok=True)
        (run / f"{component}.pid").write_text(f"{proc.pid}\n")

    def send_signal(self, component: str, sig: int) -> None:
        """Send ``sig`` to a component's whole process group (e.g. SIGSTOP, SIGCONT)."""
        os.killpg(self.procs[component].pid, sig)

    def kill(self, component: str, sig: int = signal.SIGTERM, grace: float = 60) -> None:
        """Stop one component's process group with ``sig`` (SIGKILL after ``grace`` s)."""
        proc = self.procs[component]
        self.stopped.add(component)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, sig)
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)

    def lose(self, component: str) -> None:
        """SIGKILL a component with every process under it, as when its pod or node is lost
        (``tests/e2e/process_tree.py``: Airflow's task runner outlives a :meth:`kill`)."""
        self.stopped.add(component)
        process_tree.sigkill_tree(self.procs[component].pid)
        self.procs[component].wait(timeout=10)

    def start_again(self, component: str) -> None:
        """Start a stopped component again (a supervisor's restart); its log goes on."""
        self._spawn(component, "ab")
        self.stopped.discard(component)

    def restart(self, component: str, sig: int = signal.SIGTERM, grace: float = 60) -> None:
        """:meth:`kill` one component, then :meth:`start_again` it."""
        self.kill(component, sig, grace)
        self.start_again(component)

    def _api_ready(self) -> bool:
        self.check_alive()
        return httpx.get(f"{self.base_url}/api/v2/monitor/health", timeout=5).status_code == 200

    def check_alive(self, components: Iterable[str] | None = None) -> None:
        """Raise if a component exited that no one stopped; while :meth:`supervised`,
        start it again instead."""
        for name in self.components if components is None else components:
            proc = self.procs.get(name)
            if proc is None or proc.poll() is None or name in self.stopped:
                continue
            if self._restarts is None:
                tail = self.log_tail(name)
                raise RuntimeError(f"airflow {name} exited with {proc.returncode}:\n{tail}")
            self._restarts.append(f"{name} (exit {proc.returncode})")
            self.start_again(name)

    @contextlib.contextmanager
    def supervised(self) -> Iterator[list[str]]:
        """Within the block, a component that exits is started again at the next
        :meth:`check_alive`, as its supervisor (a Kubernetes Deployment, systemd) does in
        production: Airflow's scheduler exits when its database goes away (a PostgreSQL
        restart), and nothing of Airflow restarts it. Yields the restarts, for the record."""
        self._restarts = restarts = []
        try:
            yield restarts
        finally:
            self._restarts = None

    def log_tail(self, component: str, lines: int = 40) -> str:
        path = self.log_dir / f"{component}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self, grace: float = 15) -> None:
        """SIGTERM every component's process group, then SIGKILL what is left; then stop
        PostgreSQL (and remove its temp dir, unless it was given)."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGCONT)  # a frozen one must hear the SIGTERM

            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        for proc in self.procs.values():
            # The group, not just the leader: task runners and log servers are children.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        self.postgres.stop()
        if self.redis is not None:
            self.redis.stop()
        if self._own_postgres_dir:
            shutil.rmtree(self.postgres_dir, ignore_errors=True)

"""A PostgreSQL server for the test Airflow stacks, started as a plain process in a state dir.

Debian's ``postgresql`` binaries (``scripts/install-system-deps.sh`` installs them when
missing), run the way the local cluster runs its components: ``initdb`` (or a copy of a cached
data dir), then ``postgres`` on a free port of 127.0.0.1 with its unix socket in the state
dir, stopped at the end. No Docker, no system service, nothing outside the state dir.

PostgreSQL refuses to run as root. As root (CI is), the server runs as the ``postgres`` user
that Debian's package creates, and its state dir is handed to that user; the directories above
it must let that user through (``/tmp`` and a checkout under ``/work`` do).

The server is a test database: it does not wait for the disk (``fsync=off``). A clean stop or
restart loses nothing; only a crash of the machine could.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import pwd
import shutil
import signal
import stat
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_volcano_wandb.testing.cluster.process import free_ports

SERVICE_USER = "postgres"  # created by Debian's postgresql-common
ROLE = DATABASE = "airflow"
# Two schedulers, two triggerers, the API server and the DAG processor each keep a pool.
MAX_CONNECTIONS = 200
SETTINGS = {
    "listen_addresses": "127.0.0.1",
    "max_connections": str(MAX_CONNECTIONS),
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    # For the post-mortem in postgres.log: lock waits past deadlock_timeout (1 s), slow
    # statements.
    "log_lock_waits": "on",
    "log_min_duration_statement": "5000",
}


def bindir() -> Path:
    """Debian's newest installed PostgreSQL's ``bin`` (``/usr/lib/postgresql/N/bin``)."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not found:
        raise FileNotFoundError(
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres): "
            "run scripts/install-system-deps.sh"
        )
    return found[-1].parent


def version() -> str:
    """The major version of :func:`bindir`'s PostgreSQL, e.g. ``"15"``."""
    return bindir().parent.name


def _service_user() -> pwd.struct_passwd | None:
    """Who runs the server: nobody else as a normal user; ``postgres`` as root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise RuntimeError(
            f"PostgreSQL cannot run as root and there is no {SERVICE_USER!r} user: "
            "run scripts/install-system-deps.sh (Debian's postgresql package creates it)"
        ) from None


def _as_service_user() -> dict[str, Any]:
    user = _service_user()
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _hand_over(path: Path) -> None:
    """Make ``path`` and all below it the service user's (a no-op unless root)."""
    user = _service_user()
    if user is None:
        return
    for ancestor in path.resolve().parents:
        if not ancestor.stat().st_mode & stat.S_IXOTH:
            raise PermissionError(
                f"{ancestor} does not let the {SERVICE_USER!r} user through (mode "
                f"{stat.filemode(ancestor.stat().st_mode)}): put the PostgreSQL state dir elsewhere"
            )
    for root, dirs, files in os.walk(path):
        os.chown(root, user.pw_uid, user.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), user.pw_uid, user.pw_gid, follow_symlinks=False)


def _die_with_parent() -> None:
    """In the child, after it became the service user: SIGINT (a fast shutdown) when the
    test process dies, so a killed test run leaves no server behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGINT)  # PR_SET_PDEATHSIG


@dataclass
class PostgresServer:
    """One PostgreSQL server whose every file is under ``state_dir``."""

    state_dir: Path
    port: int = 0  # 0: a free one, picked at the first start and kept across restarts
    #: Where ``postgres.log`` goes (default: the state dir).
    log_dir: Path | None = None
    #: Outlive this process (``make airflow-up``); otherwise the server is this process's
    #: child and stops when this process dies.
    detached: bool = False
    #: More addresses to listen on than 127.0.0.1, and the network (CIDR) whose clients are
    #: trusted there: the real node's bridge, for Airflow's pods (``kubernetes_executor.py``).
    also_listen_on: tuple[str, ...] = ()
    trusted_network: str | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def data_dir(self) -> Path:
        return self.state_dir / "data"

    @property
    def socket_dir(self) -> Path:
        return self.state_dir / "run"

    @property
    def log_path(self) -> Path:
        return (self.log_dir or self.state_dir) / "postgres.log"

    def url(self, database: str = DATABASE) -> str:
        """The SQLAlchemy URL of ``database``: psycopg2 (named: SQLAlchemy 2.1 would pick psycopg
        3) over TCP, no password (trust auth)."""
        return f"postgresql+psycopg2://{ROLE}@127.0.0.1:{self.port}/{database}"

    def _connect(self, database: str, timeout: int):
        import psycopg2

        return psycopg2.connect(
            host="127.0.0.1", port=self.port, user=ROLE, dbname=database, connect_timeout=timeout
        )

    def initialize(self, seed: Path | None = None) -> None:
        """Create the data dir: a copy of ``seed`` (a stopped server's data dir), else
        ``initdb`` and an empty ``airflow`` database. Nothing is done when it exists."""
        if (self.data_dir / "PG_VERSION").exists():
            return
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if seed is not None:
            shutil.copytree(seed, self.data_dir, symlinks=True)
        _hand_over(self.state_dir)
        if seed is not None:
            return
        self._run_as_service(
            [
                str(bindir() / "initdb"),
                f"--pgdata={self.data_dir}",
                f"--username={ROLE}",
                "--auth=trust",  # a test server listening on 127.0.0.1 and its own socket
                "--encoding=UTF8",
                "--locale=C.UTF-8",
                "--no-instructions",
            ]
        )
        self.start()
        try:
            self.execute(f"CREATE DATABASE {DATABASE}", database="postgres")
        finally:
            self.stop()

    def _run_as_service(self, argv: list[str]) -> None:
        with self.log_path.open("ab") as log:
            subprocess.run(
                argv,
                check=True,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                **_as_service_user(),
            )

    def start(self, timeout: float = 120) -> None:
        """Start the server and wait until it accepts connections."""
        if self.port == 0:
            [self.port] = free_ports(1)
        argv = [str(bindir() / "postgres"), "-D", str(self.data_dir), "-p", str(self.port)]
        settings = {**SETTINGS, "unix_socket_directories": str(self.socket_dir)}
        if self.also_listen_on:
            settings["listen_addresses"] = ",".join(
                (SETTINGS["listen_addresses"], *self.also_listen_on)
            )
        if self.trusted_network:
            self._trust(self.trusted_network)
        for name, value in settings.items():
            argv += ["-c", f"{name}={value}"]
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.state_dir,
                start_new_session=True,  # a Ctrl-C of the test run is not the server's
                preexec_fn=None if self.detached else _die_with_parent,
                **_as_service_user(),
            )
        deadline = time.monotonic() + timeout
        while not self._accepts():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL did not start:\n{self.log_tail()}")
            time.sleep(0.2)

    def _trust(self, network: str) -> None:
        """Let ``network``'s clients in without a password (``pg_hba.conf``), as 127.0.0.1's."""
        hba = self.data_dir / "pg_hba.conf"
        line = f"host all all {network} trust\n"
        if line not in hba.read_text():
            with hba.open("a") as out:
                out.write(line)

    def _accepts(self) -> bool:
        import psycopg2

        try:
            self._connect("postgres", timeout=5).close()
        except psycopg2.OperationalError:
            return False
        return True

    def execute(self, sql: str, database: str = DATABASE) -> list[tuple]:
        """Run one statement outside a transaction; its rows, if any."""
        conn = self._connect(database, timeout=10)
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall() if cur.description else []
        finally:
            conn.close()

    def dump(self, path: Path, database: str = DATABASE) -> None:
        """Write ``database`` as plain SQL to ``path`` (``pg_dump``): every value readable as
        text, also those PostgreSQL keeps compressed on disk."""
        with path.open("wb") as out:
            subprocess.run(
                [
                    str(bindir() / "pg_dump"),
                    "--host=127.0.0.1",
                    f"--port={self.port}",
                    f"--username={ROLE}",
                    "--no-password",
                    database,
                ],
                check=True,
                stdout=out,
                stderr=subprocess.PIPE,
            )

    def pid(self) -> int | None:
        """The running server's pid (its ``postmaster.pid``), whoever started it."""
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def stop(self, timeout: float = 60) -> None:
        """A fast shutdown (SIGINT: sessions are ended, a checkpoint is written)."""
        pid = self.pid()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGINT)
            deadline = time.monotonic() + timeout
            while self._alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if self._alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGQUIT)  # immediate: recovery at the next start
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            self.proc = None

    def _alive(self, pid: int) -> bool:
        if self.proc is not None and self.proc.pid == pid:
            return self.proc.poll() is None
        return process_alive(pid)

    def restart(self) -> None:
        """Stop and start again on the same port (clients see their connections dropped)."""
        self.stop()
        self.start()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {self.log_path})"


def process_alive(pid: int) -> bool:
    """Whether ``pid`` runs and is no zombie: a server or component this harness started and
    did not wait for is a zombie once it exits."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[-1].split()[0]
    except OSError:
        return False
    return state != "Z"

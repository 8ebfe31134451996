"""A Redis server for the test Airflow stacks' CeleryExecutor (the broker), as a plain process
in a state dir: Debian's ``redis-server`` (``scripts/install-system-deps.sh`` installs it when
missing), on a free port of 127.0.0.1, started and stopped with the stack, the way
``tests/e2e/postgres.py`` runs PostgreSQL. The package's system service is never used.

Nothing is persisted (no RDB snapshots, no append-only file): a broker's queue lives as long
as the stack, and a restart of the stack starts from an empty one.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from airflow_volcano_wandb.testing.cluster.process import free_ports
from tests.e2e.postgres import process_alive

BINARY = Path("/usr/bin/redis-server")


def _die_with_parent() -> None:
    """In the child: SIGTERM (Redis's clean shutdown) when the test process dies, so a killed
    test run leaves no server behind."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class RedisServer:
    """One Redis server whose every file is under ``state_dir``."""

    state_dir: Path
    port: int = 0  # 0: a free one, picked at the start
    log_dir: Path | None = None
    #: Outlive this process (``make airflow-up``); otherwise it stops when this process dies.
    detached: bool = False
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def pid_path(self) -> Path:
        return self.state_dir / "redis.pid"

    @property
    def log_path(self) -> Path:
        return (self.log_dir or self.state_dir) / "redis.log"

    def url(self, database: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 60) -> None:
        """Start the server and wait until it answers PING."""
        if not BINARY.exists():
            raise FileNotFoundError(
                f"{BINARY} is missing: run scripts/install-system-deps.sh (Debian's redis-server)"
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        if self.port == 0:
            [self.port] = free_ports(1)
        argv = [
            str(BINARY),
            "--bind", "127.0.0.1",
            "--port", str(self.port),
            "--dir", str(self.state_dir),
            "--pidfile", str(self.pid_path),
            "--logfile", str(self.log_path),
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
        ]  # fmt: skip
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            cwd=self.state_dir,
            start_new_session=True,  # a Ctrl-C of the test run is not the server's
            preexec_fn=None if self.detached else _die_with_parent,
        )
        deadline = time.monotonic() + timeout
        while not self._answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"Redis did not start:\n{self.log_tail()}")
            time.sleep(0.1)

    def _answers(self) -> bool:
        """Whether it answers PING (in Redis's wire protocol: no client library needed)."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2) as conn:
                conn.sendall(b"PING\r\n")
                return conn.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def pid(self) -> int | None:
        """The running server's pid (its pid file), whoever started it."""
        try:
            pid = int(self.pid_path.read_text().split()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM (nothing to save), SIGKILL after ``timeout`` seconds."""
        pid = self.pid() or (self.proc.pid if self.proc and self.proc.poll() is None else None)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + timeout
            while process_alive(pid) and time.monotonic() < deadline:
                if self.proc is not None and self.proc.pid == pid:
                    self.proc.poll()  # reap it, or it stays a zombie
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=10)
            self.proc = None

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return f"(no log at {self.log_path})"

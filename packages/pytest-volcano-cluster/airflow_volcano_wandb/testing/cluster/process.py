"""Start components detached from the caller, and find or stop them again by pid file."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """``count`` distinct TCP ports nothing listens on right now, picked by the kernel.

    All are held open until every one is picked: a port picked and released at once may be
    handed out again by the next pick (two components of one cluster once got the same port).
    """
    with contextlib.ExitStack() as held:
        ports = []
        for _ in range(count):
            sock = held.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            sock.bind(("127.0.0.1", 0))
            ports.append(int(sock.getsockname()[1]))
        return ports


def pid_file(state_dir: Path, name: str) -> Path:
    return state_dir / "run" / f"{name}.pid"


def log_file(state_dir: Path, name: str) -> Path:
    return state_dir / "logs" / f"{name}.log"


def start(state_dir: Path, name: str, argv: list[str], env: dict[str, str] | None = None) -> int:
    """Start ``argv`` in its own session so it outlives this process and ignores our Ctrl-C."""
    log_path = log_file(state_dir, name)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    pid_file(state_dir, name).parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log, open(os.devnull, "rb") as devnull:
        proc = subprocess.Popen(
            argv,
            stdin=devnull,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=state_dir,
            env={**os.environ, **(env or {})},
            start_new_session=True,
            close_fds=True,
        )
    pid_file(state_dir, name).write_text(f"{proc.pid}\n{argv[0]}\n")
    return proc.pid


def _read_pid(state_dir: Path, name: str) -> tuple[int, str] | None:
    try:
        pid_text, exe = pid_file(state_dir, name).read_text().splitlines()[:2]
        return int(pid_text), exe
    except (OSError, ValueError):
        return None


def _reap(pid: int) -> None:
    # A child of this very process (started earlier in the same `up`) lingers as a zombie
    # after exiting; reaping it makes "is it alive" answer correctly.
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def _alive(pid: int) -> bool:
    _reap(pid)
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def _is_ours(pid: int, exe: str) -> bool:
    """True if ``pid`` runs and is the program we started (guards against pid reuse)."""
    if not _alive(pid):
        return False
    try:
        running = os.path.realpath(f"/proc/{pid}/exe")
        cmd0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
    except OSError:
        return False
    return running == os.path.realpath(exe) or cmd0 == exe


def running_pid(state_dir: Path, name: str) -> int | None:
    found = _read_pid(state_dir, name)
    if found and _is_ours(*found):
        return found[0]
    return None


def started_alive(state_dir: Path, name: str) -> bool:
    """Liveness of a process this very ``up`` started: no identity check, so the instant
    between fork and exec (when /proc still shows the parent's program) is not "dead"."""
    found = _read_pid(state_dir, name)
    return bool(found) and _alive(found[0])


def rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def stop(state_dir: Path, name: str, timeout: float = 15.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout``; return True if something was running."""
    found = _read_pid(state_dir, name)
    pid_file(state_dir, name).unlink(missing_ok=True)
    if not found or not _is_ours(*found):
        return False
    pid, exe = found
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _is_ours(pid, exe):
            return True
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    while _is_ours(pid, exe):
        time.sleep(0.05)
    return True


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return f"(no log at {path})"

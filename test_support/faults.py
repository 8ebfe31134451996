"""Fault injection for reliability tests: stop/start one cluster component, and a TCP proxy.

- :func:`stop_component` / :func:`start_component` stop one process of a local cluster (by
  the pid file the harness wrote) and start it again with the very same command line, e.g.
  to take the kube-apiserver away for a while. Use a private cluster for that, not the shared
  session one. :func:`wait_volcano_runs_jobs` then waits until the cluster runs jobs again.
- :class:`FaultProxy` is a TCP proxy (asyncio, in a thread of its own) between a client and
  the apiserver. TLS passes through it untouched (the apiserver's certificate is valid for
  127.0.0.1, so a kubeconfig may simply point at the proxy's port). It can add latency,
  reset every connection (RST), refuse new ones, or blackhole: accept and forward nothing,
  which is what a dead NAT entry or a silently dropped route looks like to a client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import struct
import time
from pathlib import Path

import yaml

from airflow_volcano_wandb.testing.cluster import process
from airflow_volcano_wandb.testing.cluster.cluster import admin_client
from test_support.proxy_thread import ProxyThread

# ---- one component of a local cluster ------------------------------------------------------


def component_argv(state_dir: Path, name: str) -> list[str]:
    """The command line of a running component (read from /proc by its pid file)."""
    pid = process.running_pid(Path(state_dir), name)
    if pid is None:
        raise RuntimeError(f"{name} is not running in {state_dir}")
    raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    return [part.decode() for part in raw.split(b"\0") if part]


def stop_component(state_dir: Path, name: str, sig: int = signal.SIGTERM) -> list[str]:
    """Stop one component (``sig``, then SIGKILL after 15 s); return its argv for a restart."""
    state_dir = Path(state_dir)
    argv = component_argv(state_dir, name)
    if sig != signal.SIGTERM:
        pid = process.running_pid(state_dir, name)
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
    process.stop(state_dir, name)
    return argv


def start_component(state_dir: Path, name: str, argv: list[str]) -> int:
    """Start a component stopped by :func:`stop_component` again; return its pid."""
    return process.start(Path(state_dir), name, argv)


def wait_apiserver_ready(state_dir: Path, timeout: float = 60.0) -> float:
    """Block until the apiserver answers /readyz; return the seconds it took."""
    import json

    state_dir = Path(state_dir)
    server = json.loads((state_dir / "state.json").read_text())["server"]
    kube = admin_client(state_dir, server)
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        with contextlib.suppress(Exception):
            if kube.text("/readyz") == "ok":
                return time.monotonic() - start
        time.sleep(0.2)
    raise TimeoutError(f"kube-apiserver in {state_dir} not ready after {timeout}s")


_JOBS = "/apis/batch.volcano.sh/v1alpha1/namespaces/default/jobs"


def _probe_job(name: str) -> dict:
    pod = {"containers": [{"name": "probe", "image": "busybox"}], "restartPolicy": "Never"}
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "minAvailable": 1,
            "schedulerName": "volcano",
            "tasks": [{"name": "probe", "replicas": 1, "template": {"spec": pod}}],
        },
    }


def wait_volcano_runs_jobs(
    state_dir: Path, timeout: float = 180.0, attempt_timeout: float = 20.0
) -> float:
    """Block until a probe Volcano Job runs to completion; return the seconds it took.

    A ready apiserver is not yet a working cluster: after a restart, Volcano's controllers
    reconnect their watches with a backoff of their own. Volcano's job controller only
    reacts to a PodGroup *update*, so a job whose PodGroup was created and enqueued while
    that watch was away is never started (it stays Pending). Each probe that does not
    finish within ``attempt_timeout`` is deleted and another is tried, until one completes.
    """
    import json

    state_dir = Path(state_dir)
    server = json.loads((state_dir / "state.json").read_text())["server"]
    kube = admin_client(state_dir, server)
    start = time.monotonic()
    attempt = 0
    while time.monotonic() - start < timeout:
        attempt += 1
        name = f"avw-settle-probe-{os.getpid()}-{attempt}"
        with contextlib.suppress(Exception):
            kube.request("POST", _JOBS, _probe_job(name))
        deadline = time.monotonic() + attempt_timeout
        phase = None
        while time.monotonic() < deadline and phase != "Completed":
            time.sleep(0.5)
            with contextlib.suppress(Exception):
                job = kube.get_or_none(f"{_JOBS}/{name}") or {}
                phase = job.get("status", {}).get("state", {}).get("phase")
        with contextlib.suppress(Exception):
            kube.request("DELETE", f"{_JOBS}/{name}", {"propagationPolicy": "Background"})
        if phase == "Completed":
            return time.monotonic() - start
    raise TimeoutError(f"Volcano in {state_dir} ran no probe job within {timeout}s")


def kubeconfig_for_server(kubeconfig: Path, server: str, out: Path) -> Path:
    """A copy of ``kubeconfig`` whose clusters point at ``server`` (e.g. a proxy)."""
    config = yaml.safe_load(Path(kubeconfig).read_text())
    for cluster in config.get("clusters") or []:
        cluster["cluster"]["server"] = server
    out.write_text(yaml.safe_dump(config))
    out.chmod(0o600)
    return out


# ---- the TCP fault proxy -------------------------------------------------------------------


class FaultProxy(ProxyThread):
    """A TCP proxy with switchable faults. Use as a context manager, or ``start``/``stop``.

    Modes (set with the methods below, effective immediately, also on open connections):

    - ``pass``: forward both ways;
    - ``latency``: forward, delaying every chunk by ``delay`` seconds;
    - ``blackhole``: keep connections open but forward nothing (new ones are accepted too);
    - ``refuse``: new connections are reset at once.

    :meth:`reset_all` aborts every open connection with a TCP RST. :meth:`freeze_existing`
    silently stops every connection open now (forever), while new ones work: a dead
    connection the client is not told about. :meth:`lose_next_answer` forwards the next
    large request (e.g. a create), then resets the connection before the answer arrives,
    or holds the answer back forever.
    """

    def __init__(self, target_host: str, target_port: int) -> None:
        super().__init__("fault proxy")
        self.target = (target_host, target_port)
        self.mode = "pass"
        self.delay = 0.0
        self.port = 0
        self.connections = 0  # accepted so far
        self.resets = 0
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._frozen: set[asyncio.StreamWriter] = set()
        self._lose_answer_over: int | None = None
        self._lose_silently = False
        self.lost_answers = 0

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # ---- control (thread-safe) -------------------------------------------------------

    def set_pass(self) -> None:
        self.mode, self.delay = "pass", 0.0

    def set_latency(self, delay: float) -> None:
        self.mode, self.delay = "latency", delay

    def set_blackhole(self) -> None:
        self.mode = "blackhole"

    def set_refuse(self) -> None:
        self.mode = "refuse"

    def freeze_existing(self) -> int:
        """Forward nothing more on the connections open now; return how many there are."""
        self._frozen = set(self._writers)
        return len(self._frozen) // 2

    def lose_next_answer(self, larger_than: int = 2000, silently: bool = False) -> None:
        """The next client chunk over ``larger_than`` bytes reaches the server; its answer
        does not: the connection is reset 0.5 s later, or with ``silently`` the answer is
        held forever and the client is told nothing (no RST, no FIN)."""
        self._lose_answer_over = larger_than
        self._lose_silently = silently

    def reset_all(self) -> int:
        """Abort every open connection (RST); return how many there were."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(self._reset_all(), self._loop).result(10)

    # ---- life cycle ------------------------------------------------------------------

    def stop(self) -> None:
        if self._loop is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._joined(10)

    # ---- internals -------------------------------------------------------------------

    def _serve(self) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._server = self._loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0)
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            self._loop.run_forever()
        finally:
            self._loop.close()

    async def _shutdown(self) -> None:
        assert self._server is not None
        self._server.close()
        await self._reset_all()

    async def _reset_all(self) -> int:
        count = 0
        for writer in list(self._writers):
            _abort(writer)
            count += 1
        self._writers.clear()
        self.resets += count
        return count

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if self.mode == "refuse":
            _abort(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            _abort(writer)
            return
        self._writers.update((writer, up_writer))
        try:
            await asyncio.gather(
                self._pipe(reader, up_writer, client_writer=writer),
                self._pipe(up_reader, writer),
                return_exceptions=True,
            )
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                with contextlib.suppress(Exception):
                    w.close()

    async def _pipe(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        client_writer: asyncio.StreamWriter | None = None,
    ) -> None:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            while self.mode == "blackhole" or writer in self._frozen:
                await asyncio.sleep(0.05)  # hold the bytes; the peer hears nothing
            if self.mode == "latency" and self.delay:
                await asyncio.sleep(self.delay)
            writer.write(data)
            await writer.drain()
            threshold = self._lose_answer_over
            if client_writer is not None and threshold is not None and len(data) > threshold:
                self._lose_answer_over = None
                self.lost_answers += 1
                if self._lose_silently:
                    self._frozen.add(client_writer)  # the answer is held: the client waits
                    continue
                await asyncio.sleep(0.5)  # the server applies the request...
                _abort(client_writer)  # ...and its answer never arrives
                _abort(writer)
                return
        with contextlib.suppress(Exception):
            writer.write_eof()


def _abort(writer: asyncio.StreamWriter) -> None:
    """Close with RST rather than FIN (SO_LINGER 0), like a crashed peer or a middlebox."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()

"""The life cycle both fault proxies share (``faults.FaultProxy``, ``http_faults.HttpFaultProxy``):
an asyncio server in a daemon thread of its own, started and stopped from the test's thread,
or used as a context manager."""

from __future__ import annotations

import asyncio
import threading
from typing import TypeVar

_P = TypeVar("_P", bound="ProxyThread")


class ProxyThread:
    """A proxy whose event loop runs in thread ``name``: ``_serve`` (run in it) sets
    ``_loop`` and, once the proxy listens, ``_ready``; ``stop`` ends it and calls ``_joined``."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    def _serve(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def start(self: _P) -> _P:
        self._thread = threading.Thread(target=self._serve, name=self._name, daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError(f"{self._name} did not start")
        return self

    def _joined(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the thread to end; the loop is gone."""
        if self._thread is not None:
            self._thread.join(timeout)
        self._loop = None

    def __enter__(self: _P) -> _P:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

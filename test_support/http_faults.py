"""An HTTP fault proxy in front of a local cluster's apiserver: forged 429/503 answers.

:class:`~test_support.faults.FaultProxy` passes TLS through untouched, so it
can break connections but cannot answer a request. :class:`HttpFaultProxy` terminates TLS
with the cluster's own apiserver certificate (valid for 127.0.0.1 and signed by the CA the
cluster's kubeconfig already trusts), so a kubeconfig only needs the proxy's URL
(:func:`~test_support.faults.kubeconfig_for_server`). Every request is
forwarded to the apiserver as the cluster's admin and its answer streamed back, so watches
work through it. Rules make it answer chosen requests itself, as a throttling apiserver
(API Priority and Fairness, ``--max-requests-inflight``) or a load balancer would::

    with HttpFaultProxy(state_dir) as proxy:
        # the next two job creates are refused before the apiserver sees them
        proxy.answer("POST", r"/jobs$", status=429, times=2, retry_after=1)
        # the next create is applied by the apiserver, but the client is told 503
        proxy.answer("POST", r"/jobs$", status=503, after_forwarding=True)

``proxy.forged`` lists what was answered that way, and when, so a test can show its faults
happened (and that a client waited as long as Retry-After asked).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
from aiohttp import web

from airflow_volcano_wandb.testing.cluster.certs import PKI
from test_support.proxy_thread import ProxyThread

# Headers about one hop's connection, never forwarded (RFC 9110, section 7.6.1).
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_REASONS = {429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable"}


@dataclass
class ForgedAnswer:
    """Answer up to ``times`` requests matching ``method`` and ``path`` with ``status``."""

    method: str
    path: re.Pattern[str]
    status: int
    times: int
    retry_after: int | None
    after_forwarding: bool

    def matches(self, method: str, path_and_query: str) -> bool:
        return self.times > 0 and method == self.method and bool(self.path.search(path_and_query))


@dataclass(frozen=True)
class Forged:
    """One request the proxy answered itself; ``at`` is ``time.monotonic()``."""

    method: str
    path: str
    status: int
    at: float


class HttpFaultProxy(ProxyThread):
    """A TLS-terminating proxy to the apiserver of the local cluster in ``state_dir``."""

    def __init__(self, state_dir: Path) -> None:
        super().__init__("HTTP fault proxy")
        state_dir = Path(state_dir)
        self.upstream = json.loads((state_dir / "state.json").read_text())["server"]
        pki = PKI(state_dir / "pki")
        self._server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_tls.load_cert_chain(str(pki.cert("apiserver")), str(pki.key("apiserver")))
        self._client_tls = ssl.create_default_context(cafile=str(pki.ca))
        self._client_tls.load_cert_chain(str(pki.cert("admin")), str(pki.key("admin")))
        self.port = 0
        self.forged: list[Forged] = []
        self._rules: list[ForgedAnswer] = []
        self._lock = threading.Lock()
        self._stopped: asyncio.Event | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    # ---- control (thread-safe) -------------------------------------------------------

    def answer(
        self,
        method: str,
        path: str,
        *,
        status: int,
        times: int = 1,
        retry_after: int | None = None,
        after_forwarding: bool = False,
    ) -> None:
        """Answer the next ``times`` matching requests with ``status``.

        ``path`` is a regular expression searched in the request's path and query (e.g.
        ``r"/jobs$"`` for creates, ``r"/jobs\\?.*watch="`` for watches). With
        ``after_forwarding`` the apiserver gets and applies the request first, and only its
        answer is replaced: what a client sees when a gateway times out on a slow create.
        """
        rule = ForgedAnswer(
            method.upper(), re.compile(path), status, times, retry_after, after_forwarding
        )
        with self._lock:
            self._rules.append(rule)

    def pending(self) -> int:
        """How many forged answers are still to be given."""
        with self._lock:
            return sum(rule.times for rule in self._rules)

    # ---- life cycle ------------------------------------------------------------------

    def stop(self) -> None:
        if self._loop is None or self._stopped is None:
            return
        self._loop.call_soon_threadsafe(self._stopped.set)
        self._joined(15)

    # ---- internals -------------------------------------------------------------------

    def _serve(self) -> None:
        asyncio.run(self._run())  # which also ends the handlers still streaming a watch

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        connector = aiohttp.TCPConnector(ssl=self._client_tls)
        # No client timeout: watches stay open as long as the apiserver keeps them.
        timeout = aiohttp.ClientTimeout(total=None)
        async with aiohttp.ClientSession(
            connector=connector, timeout=timeout, auto_decompress=False
        ) as session:
            self._session = session
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", self._handle)
            runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)
            await runner.setup()
            listener = socket.create_server(("127.0.0.1", 0))
            self.port = listener.getsockname()[1]
            await web.SockSite(runner, listener, ssl_context=self._server_tls).start()
            self._ready.set()
            await self._stopped.wait()
            await runner.cleanup()

    def _take(self, method: str, path_and_query: str) -> ForgedAnswer | None:
        with self._lock:
            for rule in self._rules:
                if rule.matches(method, path_and_query):
                    rule.times -= 1
                    return rule
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        path_and_query = str(request.rel_url)
        rule = self._take(request.method, path_and_query)
        body = await request.read()
        if rule is not None and not rule.after_forwarding:
            return self._forge(rule, request.method, path_and_query)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        assert self._session is not None
        async with self._session.request(
            request.method, self.upstream + path_and_query, data=body or None, headers=headers
        ) as upstream:
            if rule is not None:
                await upstream.read()  # applied by the apiserver; the client is told otherwise
                return self._forge(rule, request.method, path_and_query)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for key, value in upstream.headers.items():
                if key.lower() not in _HOP_BY_HOP:
                    response.headers[key] = value
            await response.prepare(request)
            try:
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
                await response.write_eof()
            except ConnectionResetError:
                pass  # the client went away (e.g. it closed a watch): nothing left to tell it
            return response

    def _forge(self, rule: ForgedAnswer, method: str, path_and_query: str) -> web.Response:
        path = path_and_query.split("?", 1)[0]
        self.forged.append(Forged(method, path, rule.status, time.monotonic()))
        status = {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": f"injected by HttpFaultProxy: HTTP {rule.status}",
            "reason": _REASONS.get(rule.status, "InternalError"),
            "code": rule.status,
        }
        headers = {}
        if rule.retry_after is not None:
            status["details"] = {"retryAfterSeconds": rule.retry_after}
            headers["Retry-After"] = str(rule.retry_after)
        return web.json_response(status, status=rule.status, headers=headers)

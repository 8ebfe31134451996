"""A local HTTP stand-in for the W&B GraphQL API, for tests only.

No W&B server can run in this project's tests, so tests that read from W&B point the real
``wandb`` SDK (``wandb.Api``, which sends its GraphQL through the SDK's ``wandb-core`` helper)
at this server instead. It answers the operations the public API sends for what the provider
uses, recognised by their operation names and shapes as wandb 0.31 sends them:

- ``query Viewer`` (API key verification when ``wandb.Api`` is created) and
  ``query GetDefaultEntity`` (``Api.run`` asks for it when no default entity is set);
- ``query ServerFeaturesQuery`` (a server without optional features);
- what an online run sends and what reads a run (``UpsertBucket``, ``CreateRunFiles``,
  ``RunResumeStatus``, ``Run``, the file stream with its stop flag), in
  ``wandb_standin_runs.py``;
- the artifacts a run logs and uses, in ``wandb_standin_artifacts.py``;
- ``query GetRunQueueMetadata`` and ``query GetDefaultResourceConfig``
  (``Api.run_queue(entity, name).default_resource_config`` and ``.template_variables``), in
  ``wandb_standin_queues.py``.

Any other operation gets a GraphQL error naming it, and is recorded, so a test fails loudly if
the SDK starts sending something this stand-in does not know. Requests without the expected
API key (HTTP basic auth, user ``api``) get 401, like the real server.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from test_support.wandb_standin_artifacts import Artifacts
from test_support.wandb_standin_queues import LaunchQueues
from test_support.wandb_standin_requests import RecordedRequest
from test_support.wandb_standin_runs import FILE_STREAM_RE, Runs

__all__ = ["RecordedRequest", "WandbStandin"]

_OPERATION_RE = re.compile(r"\b(query|mutation)\s+(\w+)")
#: Where the wandb SDK posts its usage metrics when it is online.
TELEMETRY_PATH = "/sdk/otel/"


class WandbStandin(Runs, Artifacts, LaunchQueues):
    """A threaded HTTP server answering a few W&B GraphQL operations, on 127.0.0.1 unless
    ``host`` names another of this machine's addresses (the real node's pods reach the
    machine at its bridge's gateway)."""

    def __init__(
        self,
        *,
        api_key: str,
        viewer_entity: str = "standin-user",
        any_run_summary: dict[str, Any] | Callable[[str], dict[str, Any]] | None = None,
        any_run_artifacts: dict[str, list[tuple[str, int, str]]] | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        """``any_run_summary``: answer for every run asked about, as if each had finished with
        these summary metrics (for runs whose id a test cannot know in advance; a function of
        the run id gives each run values of its own);
        ``any_run_artifacts``: ``{"used"|"logged": [(name, version, type), ...]}`` for runs
        without artifacts of their own, in the run's own entity and project."""
        self.api_key = api_key
        self.host = host
        self.viewer_entity = viewer_entity
        self.requests: list[RecordedRequest] = []
        self.telemetry: list[str] = []
        self._init_runs(any_run_summary)
        self._init_artifacts(any_run_artifacts)
        self._init_queues()
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to give ``wandb`` (as ``base_url`` / connection host)."""
        assert self._server is not None, "stand-in not started"
        return f"http://{self.host}:{self._server.server_port}"

    def start(self) -> WandbStandin:
        """Start serving on a free port of ``host``."""
        standin = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload = standin._handle(self.path, dict(self.headers), body)
                out = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def do_PUT(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status = standin._upload(self.path, dict(self.headers), body)
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                status, body = standin._download(self.path, dict(self.headers))
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                # Quiet: request lines would clutter test output (and carry no secrets anyway).
                return

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="wandb-standin", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> WandbStandin:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- GraphQL ---------------------------------------------------------------------------

    def operations(self) -> list[str | None]:
        """Operation names received so far, in order."""
        with self._lock:
            return [r.operation for r in self.requests]

    def _handle(self, path: str, headers: dict[str, str], body: bytes) -> tuple[int, Any]:
        if path.startswith(TELEMETRY_PATH):
            # The SDK's own usage metrics (OpenTelemetry, sent by any online client): taken
            # and kept apart, since they are no call of the provider's.
            with self._lock:
                self.telemetry.append(path)
            return 200, {}
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            request = {}
        query = request.get("query") or ""
        match = _OPERATION_RE.search(query)
        operation = request.get("operationName") or (match.group(2) if match else None)
        record = RecordedRequest(
            path, headers, operation, query, dict(request.get("variables") or {})
        )
        with self._lock:
            self.requests.append(record)
        stream = FILE_STREAM_RE.match(path)
        if stream is not None:
            record.variables = {"files": sorted(request.get("files") or {})}
            where = (stream[1], stream[2], stream[3])
            return self._file_stream(record, where, request.get("files") or {})
        if path.rstrip("/") != "/graphql":
            record.status = 404
            return 404, {"errors": [{"message": f"stand-in: no route {path}"}]}
        if record.basic_auth_password != self.api_key:
            record.status = 401
            return 401, {"errors": [{"message": "stand-in: wrong or missing API key"}]}
        handler = getattr(self, f"_op_{operation}", None)
        if handler is None:
            return 200, {
                "data": None,
                "errors": [{"message": f"stand-in: unsupported operation {operation!r}"}],
            }
        return 200, {"data": handler(record.variables)}

    def _upload(self, path: str, headers: dict[str, str], body: bytes) -> int:
        """A PUT of a run's or an artifact's file to the URL the stand-in gave for it."""
        record = RecordedRequest(path, headers, None, "", {}, 404)
        with self._lock:
            self.requests.append(record)
            if self._put_run_file(path, body) or self._put_artifact_file(path, body):
                record.status = 200
        return record.status

    def _download(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """A GET of an artifact's file (or manifest) from the URL the stand-in gave for it."""
        record = RecordedRequest(path, headers, None, "", {}, 404)
        with self._lock:
            self.requests.append(record)
            body = self._artifact_file(path)
            if body is None:
                return 404, b""
            record.status = 200
        return 200, body

    def _op_Viewer(self, variables: dict[str, Any]) -> dict[str, Any]:
        return {
            "viewer": {
                "id": "VXNlcjox",
                "entity": self.viewer_entity,
                "username": self.viewer_entity,
                "email": f"{self.viewer_entity}@example.invalid",
                "flags": "{}",
                "teams": {"edges": []},
            }
        }

    def _op_GetDefaultEntity(self, variables: dict[str, Any]) -> dict[str, Any]:
        return {"viewer": {"id": "VXNlcjox", "entity": self.viewer_entity}}

    def _op_ServerFeaturesQuery(self, variables: dict[str, Any]) -> dict[str, Any]:
        return {"serverInfo": {"features": []}}  # a server without optional features

"""A local HTTP stand-in for the W&B GraphQL API, for tests only.

No W&B server can run in this project's tests, so tests that read from W&B point the real
``wandb`` SDK (``wandb.Api``, which sends its GraphQL through the SDK's ``wandb-core`` helper)
at this server instead. It answers the operations the public API sends for what the provider
uses, recognised by their operation names and shapes as wandb 0.31 sends them:

- ``query Viewer`` (API key verification when ``wandb.Api`` is created) and
  ``query GetDefaultEntity`` (``Api.run`` asks for it when no default entity is set);
- ``query Run`` (``Api.run(path)``: the run, with ``summaryMetrics`` as a JSON string);
- ``query GetRunQueueMetadata`` and ``query GetDefaultResourceConfig``
  (``Api.run_queue(entity, name).default_resource_config``);
- ``query RunInputArtifacts`` and ``query RunOutputArtifacts`` (``Run.used_artifacts()`` and
  ``Run.logged_artifacts()``, one page);
- ``mutation UpsertBucket`` (``Run.update()``: config, tags and notes, then the summary), which
  changes the stored run and is kept in :attr:`WandbStandin.upserts`;
- ``query RunResumeStatus`` (``wandb.init(resume="allow")``: always a new run);
- ``POST /files/<entity>/<project>/<run>/file_stream``, where an online run (``wandb.init``
  against this stand-in) sends its history, logs and heartbeats. The answer carries the run's
  stop flag (``{"stopped": true}`` once :meth:`WandbStandin.stop_run` was called): that is how
  wandb-core 0.31 learns that a run was stopped in the W&B UI, and the SDK then calls the run's
  ``stop_fn``. Of what a request sends, the names of its files are kept (as its ``variables``).

Any other operation gets a GraphQL error naming it, and is recorded, so a test fails loudly if
the SDK starts sending something this stand-in does not know. Requests without the expected
API key (HTTP basic auth, user ``api``) get 401, like the real server.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["RecordedRequest", "WandbStandin"]

_OPERATION_RE = re.compile(r"\b(query|mutation)\s+(\w+)")
_FILE_STREAM_RE = re.compile(r"^/files/([^/]+)/([^/]+)/([^/]+)/file_stream$")
LAUNCH_PROJECT = "model-registry"  # where W&B keeps Launch queues (LAUNCH_DEFAULT_PROJECT)


@dataclass
class RecordedRequest:
    """One request the stand-in received."""

    path: str
    headers: dict[str, str]
    operation: str | None
    query: str
    variables: dict[str, Any]
    status: int = 200

    @property
    def basic_auth_password(self) -> str | None:
        """The password of an HTTP basic ``Authorization`` header (the W&B API key)."""
        header = self.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        try:
            _user, _, password = base64.b64decode(header[6:]).decode().partition(":")
        except ValueError:
            return None
        return password


@dataclass
class _Run:
    entity: str
    project: str
    run_id: str
    summary: dict[str, Any]
    config: dict[str, Any] = field(default_factory=dict)
    state: str = "finished"
    name: str | None = None
    tags: list[str] = field(default_factory=list)
    notes: str | None = None

    @property
    def storage_id(self) -> str:
        return base64.b64encode(f"Run:v1:{self.run_id}".encode()).decode()


@dataclass
class _Queue:
    queue_id: str
    entity: str
    name: str
    config: Any
    resource: str
    config_id: str | None


class WandbStandin:
    """A threaded HTTP server on 127.0.0.1 answering a few W&B GraphQL operations."""

    def __init__(
        self,
        *,
        api_key: str,
        viewer_entity: str = "standin-user",
        any_run_summary: dict[str, Any] | Callable[[str], dict[str, Any]] | None = None,
        any_run_artifacts: dict[str, list[tuple[str, int, str]]] | None = None,
    ) -> None:
        """``any_run_summary``: answer for every run asked about, as if each had finished with
        these summary metrics (for runs whose id a test cannot know in advance; a function of
        the run id gives each run values of its own);
        ``any_run_artifacts``: ``{"used"|"logged": [(name, version, type), ...]}`` for runs
        without artifacts of their own, in the run's own entity and project."""
        self.any_run_artifacts = any_run_artifacts or {}
        self._artifacts: dict[tuple[str, str], list[tuple[str, str, str, int, str]]] = {}
        self.api_key = api_key
        self.viewer_entity = viewer_entity
        self.any_run_summary = any_run_summary
        self.requests: list[RecordedRequest] = []
        #: The variables of every ``UpsertBucket`` mutation received, in order.
        self.upserts: list[dict[str, Any]] = []
        self._runs: dict[tuple[str, str, str], _Run] = {}
        self._stopped: set[tuple[str, str, str]] = set()
        self._queues: dict[tuple[str, str], _Queue] = {}
        self._configs: dict[tuple[str, str], _Queue] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- data ------------------------------------------------------------------------------

    def add_run(
        self,
        entity: str,
        project: str,
        run_id: str,
        *,
        summary: dict[str, Any],
        config: dict[str, Any] | None = None,
        state: str = "finished",
    ) -> None:
        """Make a run with these summary metrics known to the stand-in."""
        self._runs[(entity, project, run_id)] = _Run(
            entity, project, run_id, dict(summary), dict(config or {}), state
        )

    def add_artifact(
        self,
        run_id: str,
        direction: str,
        entity: str,
        project: str,
        name: str,
        version: int,
        artifact_type: str,
    ) -> None:
        """Record that the run ``used`` or ``logged`` (``direction``) an artifact version."""
        self._artifacts.setdefault((run_id, direction), []).append(
            (entity, project, name, version, artifact_type)
        )

    def add_queue(
        self,
        entity: str,
        name: str,
        *,
        config: Any,
        resource: str = "kubernetes",
        wrap: bool = True,
    ) -> None:
        """Make a Launch queue known, with ``config`` as its default resource config.

        With ``wrap`` the config is stored the way ``Api.create_run_queue`` and the W&B UI
        store it, ``{"resource_args": {<resource>: config}}``, serialised as a JSON string.
        ``config=None`` makes a queue without a resource config.
        """
        index = len(self._queues) + 1
        config_id = None if config is None else str(100 + index)
        stored = config
        if config is not None and wrap:
            stored = json.dumps({"resource_args": {resource: config}})
        queue = _Queue(f"UnVuUXVldWU6{index}", entity, name, stored, resource, config_id)
        self._queues[(entity, name)] = queue
        if config_id is not None:
            self._configs[(entity, config_id)] = queue

    def stop_run(self, entity: str, project: str, run_id: str) -> None:
        """Stop the run as the W&B UI's "Stop run" button does: its file stream answers
        ``stopped`` from now on."""
        with self._lock:
            self._stopped.add((entity, project, run_id))

    def log_step(self, entity: str, project: str, run_id: str, step: int) -> None:
        """The run logs ``step`` now, as a trainer's ``wandb.log`` would: its summary's
        ``_step`` and ``_timestamp`` (the time of the run's last step, epoch seconds)."""
        with self._lock:
            self._runs[(entity, project, run_id)].summary.update(
                {"_step": step, "_timestamp": time.time()}
            )

    def file_streams(self, run_id: str) -> list[RecordedRequest]:
        """The file stream requests of a run (by id) received so far."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith(f"/{run_id}/file_stream")]

    def run(self, entity: str, project: str, run_id: str) -> _Run | None:
        """A run as the stand-in now stores it (after any ``UpsertBucket``)."""
        return self._runs.get((entity, project, run_id))

    # -- lifecycle -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL to give ``wandb`` (as ``base_url`` / connection host)."""
        assert self._server is not None, "stand-in not started"
        return f"http://127.0.0.1:{self._server.server_port}"

    def start(self) -> WandbStandin:
        """Start serving on a free port of 127.0.0.1."""
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

            def do_GET(self) -> None:
                with standin._lock:
                    standin.requests.append(
                        RecordedRequest(self.path, dict(self.headers), None, "", {}, 404)
                    )
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:
                # Quiet: request lines would clutter test output (and carry no secrets anyway).
                return

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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
        stream = _FILE_STREAM_RE.match(path)
        if stream is not None:
            record.variables = {"files": sorted(request.get("files") or {})}
            return self._file_stream(record, (stream[1], stream[2], stream[3]))
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

    def _file_stream(self, record: RecordedRequest, run: tuple[str, str, str]) -> tuple[int, Any]:
        if record.basic_auth_password != self.api_key:
            record.status = 401
            return 401, {"errors": [{"message": "stand-in: wrong or missing API key"}]}
        with self._lock:
            return 200, {"stopped": run in self._stopped}

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

    def _op_RunResumeStatus(self, variables: dict[str, Any]) -> dict[str, Any]:
        # wandb.init(resume="allow") asks first; every run it starts here is a new one.
        entity = variables.get("entity") or self.viewer_entity
        return {
            "model": {
                "id": "UHJvamVjdDo3",
                "name": variables.get("project"),
                "entity": {"id": "RW50aXR5OjE=", "name": entity},
                "bucket": None,
            }
        }

    def _op_GetDefaultEntity(self, variables: dict[str, Any]) -> dict[str, Any]:
        return {"viewer": {"id": "VXNlcjox", "entity": self.viewer_entity}}

    def _op_Run(self, variables: dict[str, Any]) -> dict[str, Any]:
        key = (variables.get("entity"), variables.get("project"), variables.get("name"))
        with self._lock:
            run = self._runs.get(key)  # type: ignore[arg-type]
            if run is None and self.any_run_summary is not None and all(key):
                summary = self.any_run_summary
                if callable(summary):
                    summary = summary(key[2])  # type: ignore[arg-type]
                # Kept from now on, so that an UpsertBucket changes what the next query sees.
                run = self._runs[key] = _Run(*key, dict(summary))  # type: ignore[arg-type,misc]
        if run is None:
            return {"project": None}
        return {"project": {"run": self._run_fragment(run)}}

    def _run_fragment(self, run: _Run) -> dict[str, Any]:
        return {
            "projectId": "7",
            "id": run.storage_id,
            "tags": list(run.tags),
            "name": run.run_id,
            "displayName": run.name or run.run_id,
            "sweepName": None,
            "state": run.state,
            # The server sends config and metrics as JSON strings (GraphQL JSONString).
            "config": json.dumps({k: {"value": v} for k, v in run.config.items()}),
            "group": None,
            "jobType": None,
            "commit": None,
            "readOnly": False,
            "createdAt": "2026-01-01T00:00:00",
            "heartbeatAt": "2026-01-01T00:05:00",
            "description": None,
            "notes": run.notes,
            "systemMetrics": "{}",
            "summaryMetrics": json.dumps(run.summary),
            "historyLineCount": 0,
            "user": {"name": self.viewer_entity, "username": self.viewer_entity},
            "historyKeys": None,
        }

    def _op_UpsertBucket(self, variables: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.upserts.append(dict(variables))
            run = next(
                (r for r in self._runs.values() if r.storage_id == variables.get("id")), None
            )
            if run is None:  # the real server would create a run; no test wants that
                return {"upsertBucket": None}
            if "summaryMetrics" in variables:  # Run.update()'s second call: the summary
                run.summary = json.loads(variables["summaryMetrics"] or "{}")
                return {"upsertBucket": {"bucket": {"id": run.storage_id}}}
            if variables.get("config") is not None:
                config = json.loads(variables["config"])
                run.config = {k: v["value"] for k, v in config.items() if k != "_wandb"}
            if variables.get("tags") is not None:
                run.tags = list(variables["tags"])
            if "notes" in variables:
                run.notes = variables["notes"]
            return {"upsertBucket": {"bucket": self._run_fragment(run)}}

    def _op_ServerFeaturesQuery(self, variables: dict[str, Any]) -> dict[str, Any]:
        return {"serverInfo": {"features": []}}  # a server without optional features

    def _op_RunInputArtifacts(self, variables: dict[str, Any]) -> dict[str, Any]:
        return self._run_artifacts(variables, "used")

    def _op_RunOutputArtifacts(self, variables: dict[str, Any]) -> dict[str, Any]:
        return self._run_artifacts(variables, "logged")

    def _run_artifacts(self, variables: dict[str, Any], direction: str) -> dict[str, Any]:
        entity, project = variables.get("entity"), variables.get("project")
        run_id = str(variables.get("run"))
        found = self._artifacts.get((run_id, direction))
        if found is None:
            found = [
                (entity, project, name, version, kind)
                for name, version, kind in self.any_run_artifacts.get(direction, [])
            ]
        edges = [
            {"node": _artifact_node(i, *artifact)} for i, artifact in enumerate(found, start=1)
        ]
        page = {"__typename": "PageInfo", "endCursor": None, "hasNextPage": False}
        connection = {"totalCount": len(edges), "pageInfo": page, "edges": edges}
        return {"project": {"run": {"artifacts": connection}}}

    def _op_GetRunQueueMetadata(self, variables: dict[str, Any]) -> dict[str, Any]:
        if variables.get("projectName") != LAUNCH_PROJECT:
            return {"project": None}
        queue = self._queues.get((variables.get("entityName"), variables.get("runQueue")))  # type: ignore[arg-type]
        if queue is None:
            return {"project": {"runQueue": None}}
        return {
            "project": {
                "runQueue": {
                    "id": queue.queue_id,
                    "access": "PROJECT",
                    "defaultResourceConfigID": queue.config_id,
                    "prioritizationMode": "DISABLED",
                    "externalLinks": {},
                }
            }
        }

    def _op_GetDefaultResourceConfig(self, variables: dict[str, Any]) -> dict[str, Any]:
        queue = self._configs.get((variables.get("entityName"), str(variables.get("id"))))  # type: ignore[arg-type]
        if queue is None:
            return {"entity": {"defaultResourceConfig": None}}
        return {
            "entity": {
                "defaultResourceConfig": {
                    "config": queue.config,
                    "resource": queue.resource,
                    "templateVariables": [],
                }
            }
        }


def _artifact_node(
    index: int, entity: str, project: str, name: str, version: int, artifact_type: str
) -> dict[str, Any]:
    """An ``ArtifactFragment`` as wandb 0.31 asks for it."""
    project_info = {
        "id": "UHJvamVjdDo3",
        "internalId": "7",
        "name": project,
        "entity": {"name": entity},
    }
    sequence = {"__typename": "ArtifactSequence", "name": name, "project": project_info}
    return {
        "__typename": "Artifact",
        "id": base64.b64encode(f"Artifact:{index}:{name}:{version}".encode()).decode(),
        "artifactSequence": sequence,
        "versionIndex": version,
        "artifactType": {"name": artifact_type},
        "description": None,
        "metadata": "{}",
        "ttlDurationSeconds": -1,
        "ttlIsInherited": True,
        "tags": [],
        "historyStep": None,
        "state": "COMMITTED",
        "size": 1024,
        "digest": f"{index:032x}",
        "digestAlgorithm": "MANIFEST_MD5",
        "commitHash": None,
        "fileCount": 1,
        "createdAt": "2026-01-01T00:00:00",
        "updatedAt": "2026-01-01T00:05:00",
        "aliases": [],
    }

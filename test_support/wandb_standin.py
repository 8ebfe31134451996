"""A local HTTP stand-in for the W&B GraphQL API, for tests only.

No W&B server can run in this project's tests, so tests that read from W&B point the real
``wandb`` SDK (``wandb.Api``, which sends its GraphQL through the SDK's ``wandb-core`` helper)
at this server instead. It answers the operations the public API sends for what the provider
uses, recognised by their operation names and shapes as wandb 0.31 sends them:

- ``query Viewer`` (API key verification when ``wandb.Api`` is created) and
  ``query GetDefaultEntity`` (``Api.run`` asks for it when no default entity is set);
- ``query Run`` (``Api.run(path)``: the run, with ``summaryMetrics`` as a JSON string);
- ``query GetRunQueueMetadata`` and ``query GetDefaultResourceConfig``
  (``Api.run_queue(entity, name).default_resource_config`` and ``.template_variables``), in
  ``wandb_standin_queues.py``;
- ``query RunInputArtifacts`` and ``query RunOutputArtifacts`` (``Run.used_artifacts()`` and
  ``Run.logged_artifacts()``, one page);
- ``mutation UpsertBucket`` (``Run.update()``: config, tags and notes, then the summary), which
  changes the stored run and is kept in :attr:`WandbStandin.upserts`;
- ``query RunResumeStatus`` (``wandb.init(resume=...)``: a run made known with
  :meth:`WandbStandin.add_run` is resumed, as ``resume="must"`` needs; any other is new);
- ``POST /files/<entity>/<project>/<run>/file_stream``, where an online run (``wandb.init``
  against this stand-in) sends its history, logs and heartbeats. The answer carries the run's
  stop flag (``{"stopped": true}`` once :meth:`WandbStandin.stop_run` was called): that is how
  wandb-core 0.31 learns that a run was stopped in the W&B UI, and the SDK then calls the run's
  ``stop_fn``. Of what a request sends, the names of its files are kept (as its ``variables``);
- artifacts, as an online run logs one (``run.log_artifact(...).wait()``): ``query
  ArtifactType`` (does the collection exist?), ``mutation CreateArtifact`` (a new version,
  ``v0``, ``v1``, ... per collection, with its metadata and aliases), ``mutation
  CreateArtifactManifest`` and ``mutation CreateArtifactFiles`` (upload URLs on this stand-in:
  ``PUT /artifacts/<id>/files/<name>``, kept in memory), ``mutation CommitArtifact`` (the
  version becomes visible and takes ``latest`` and its aliases from older versions), then
  ``query ArtifactByID``; and as a run reads one (``run.use_artifact("name:latest")`` then
  ``.download()``): ``query ArtifactMembershipByName`` (none: not found), ``mutation
  UseArtifact`` (the run's ``used_artifacts()`` gain it), ``query FetchArtifactManifest`` and
  ``query GetArtifactMembershipFileUrls`` (``GET`` URLs of the manifest and files). The file
  URLs need no API key, like W&B's signed storage URLs. Multipart uploads, deduplication by
  digest and references are not known.

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
from urllib.parse import quote, unquote

from test_support.wandb_standin_queues import LaunchQueues

__all__ = ["RecordedRequest", "WandbStandin"]

_OPERATION_RE = re.compile(r"\b(query|mutation)\s+(\w+)")
#: Where the wandb SDK posts its usage metrics when it is online.
TELEMETRY_PATH = "/sdk/otel/"
_FILE_STREAM_RE = re.compile(r"^/files/([^/]+)/([^/]+)/([^/]+)/file_stream$")
_ARTIFACT_FILE_RE = re.compile(r"^/artifacts/([^/]+)/files/(.+)$")
_MANIFEST = "wandb_manifest.json"  # not a name an artifact's own file can have here


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
class _ArtifactVersion:
    """One version of an artifact collection, as logged by an online run."""

    artifact_id: str
    entity: str
    project: str
    name: str
    version: int
    artifact_type: str
    metadata: str
    digest: str
    aliases: list[str]
    state: str = "PENDING"
    files: dict[str, bytes] = field(default_factory=dict)
    """What was uploaded, by name; the manifest under :data:`_MANIFEST`."""


class WandbStandin(LaunchQueues):
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
        self.any_run_artifacts = any_run_artifacts or {}
        self._artifacts: dict[tuple[str, str], list[tuple[str, str, str, int, str]]] = {}
        self.api_key = api_key
        self.host = host
        self.viewer_entity = viewer_entity
        self.any_run_summary = any_run_summary
        self.requests: list[RecordedRequest] = []
        self.telemetry: list[str] = []
        #: The variables of every ``UpsertBucket`` mutation received, in order.
        self.upserts: list[dict[str, Any]] = []
        self._runs: dict[tuple[str, str, str], _Run] = {}
        self._stopped: set[tuple[str, str, str]] = set()
        self._init_queues()
        #: Logged artifact versions by id, and each collection's versions (v0 first).
        self._versions: dict[str, _ArtifactVersion] = {}
        self._collections: dict[tuple[str, str, str], list[_ArtifactVersion]] = {}
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

    def _upload(self, path: str, headers: dict[str, str], body: bytes) -> int:
        """A PUT of an artifact's file to the URL the stand-in gave for it."""
        record = RecordedRequest(path, headers, None, "", {}, 404)
        with self._lock:
            self.requests.append(record)
            match = _ARTIFACT_FILE_RE.match(path)
            version = match and self._versions.get(unquote(match[1]))
            if version and version.state == "PENDING":
                version.files[unquote(match[2])] = body
                record.status = 200
        return record.status

    def _download(self, path: str, headers: dict[str, str]) -> tuple[int, bytes]:
        """A GET of an artifact's file (or manifest) from the URL the stand-in gave for it."""
        record = RecordedRequest(path, headers, None, "", {}, 404)
        with self._lock:
            self.requests.append(record)
            match = _ARTIFACT_FILE_RE.match(path.partition("?")[0])
            version = match and self._versions.get(unquote(match[1]))
            body = version.files.get(unquote(match[2])) if version and match else None
            if body is None:
                return 404, b""
            record.status = 200
        return 200, body

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
        # wandb.init(resume=...) asks first: a run made known (add_run) is resumed, with no
        # history (its summary and config kept); any other starts as a new one.
        entity = variables.get("entity") or self.viewer_entity
        with self._lock:
            run = self._runs.get((entity, variables.get("project"), variables.get("name")))  # type: ignore[arg-type]
        bucket = None
        if run is not None:
            bucket = {
                "id": run.storage_id,
                "name": run.run_id,
                "summaryMetrics": json.dumps(run.summary),
                "displayName": run.name or run.run_id,
                "logLineCount": 0,
                "historyLineCount": 0,
                "eventsLineCount": 0,
                "historyTail": "[]",
                "eventsTail": "[]",
                "config": json.dumps({k: {"value": v} for k, v in run.config.items()}),
                "tags": list(run.tags),
                "notes": run.notes,
                # wandb-core takes a run without the "t" key for one created but never started.
                "wandbConfig": json.dumps({"t": {}}),
            }
        return {
            "model": {
                "id": "UHJvamVjdDo3",
                "name": variables.get("project"),
                "entity": {"id": "RW50aXR5OjE=", "name": entity},
                "bucket": bucket,
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

    # -- artifacts ---------------------------------------------------------------------------

    def logged_versions(self, entity: str, project: str, name: str) -> list[_ArtifactVersion]:
        """The versions of an artifact collection logged so far (v0 first)."""
        with self._lock:
            return list(self._collections.get((entity, project, name), []))

    def _find_version(self, entity: Any, project: Any, name: str) -> _ArtifactVersion | None:
        """``name:alias`` or ``name:v<N>`` in a project, as the server resolves it."""
        collection, _, tag = name.partition(":")
        versions = self._collections.get((entity, project, collection), [])
        tag = tag or "latest"
        for version in reversed(versions):
            if version.state == "COMMITTED" and (
                tag in version.aliases or tag == f"v{version.version}"
            ):
                return version
        return None

    def _op_ArtifactType(self, variables: dict[str, Any]) -> dict[str, Any]:
        # log_artifact asks first whether the collection exists with another type.
        with self._lock:
            found = self._find_version(
                variables.get("entity"), variables.get("project"), variables["name"]
            )
        artifact = None if found is None else {"artifactType": {"name": found.artifact_type}}
        return {"project": {"artifact": artifact}}

    def _op_CreateArtifact(self, variables: dict[str, Any]) -> dict[str, Any]:
        given = variables["input"]
        key = (given["entityName"], given["projectName"], given["artifactCollectionName"])
        with self._lock:
            versions = self._collections.setdefault(key, [])
            latest = versions[-1].artifact_id if versions else None
            version = _ArtifactVersion(
                artifact_id=base64.b64encode(
                    f"Artifact:{len(self._versions) + 1}".encode()
                ).decode(),
                entity=key[0],
                project=key[1],
                name=key[2],
                version=len(versions),
                artifact_type=given["artifactTypeName"],
                metadata=given.get("metadata") or "{}",
                digest=given["digest"],
                aliases=[a["alias"] for a in given.get("aliases") or []],
            )
            versions.append(version)
            self._versions[version.artifact_id] = version
        sequence = {"latestArtifact": None if latest is None else {"id": latest}}
        artifact = {"id": version.artifact_id, "state": "PENDING", "artifactSequence": sequence}
        return {"createArtifact": {"artifact": artifact}}

    def _file_url(self, version: _ArtifactVersion, name: str) -> str:
        """Where an artifact's file is uploaded (PUT) and downloaded (GET): this stand-in."""
        return f"{self.url}/artifacts/{quote(version.artifact_id, safe='')}/files/{quote(name)}"

    def _op_CreateArtifactManifest(self, variables: dict[str, Any]) -> dict[str, Any]:
        version = self._versions[variables["artifactID"]]
        upload = {"id": f"manifest-{version.artifact_id}", "uploadHeaders": []}
        upload["uploadUrl"] = self._file_url(version, _MANIFEST)
        manifest = {"id": f"manifest-{version.artifact_id}", "file": upload}
        return {"createArtifactManifest": {"artifactManifest": manifest}}

    def _op_CreateArtifactFiles(self, variables: dict[str, Any]) -> dict[str, Any]:
        edges = []
        for given in variables["input"]["artifactFiles"]:
            version = self._versions[given["artifactID"]]
            node = {
                "storagePath": f"{version.artifact_id}/{given['name']}",
                "uploadUrl": self._file_url(version, given["name"]),
                "uploadHeaders": [],
                "uploadMultipartUrls": None,
                "artifact": {"id": version.artifact_id},
            }
            edges.append({"node": node})
        return {"createArtifactFiles": {"files": {"edges": edges}}}

    def _op_CommitArtifact(self, variables: dict[str, Any]) -> dict[str, Any]:
        # Committed, a version is what name:alias finds; an alias names one version only, and
        # the server gives the newest "latest" whatever the client asked for.
        with self._lock:
            version = self._versions[variables["artifactID"]]
            version.state = "COMMITTED"
            version.aliases = sorted({*version.aliases, "latest"})
            for other in self._collections[(version.entity, version.project, version.name)]:
                if other is not version:
                    other.aliases = [a for a in other.aliases if a not in version.aliases]
        return {
            "commitArtifact": {"artifact": {"id": version.artifact_id, "digest": version.digest}}
        }

    def _logged_node(self, version: _ArtifactVersion) -> dict[str, Any]:
        """The ``ArtifactFragment`` of a logged version: its own id, metadata, files, aliases."""
        files = [body for name, body in version.files.items() if name != _MANIFEST]
        node = _artifact_node(
            0, version.entity, version.project, version.name, version.version, version.artifact_type
        )
        collection = {k: node["artifactSequence"][k] for k in ("__typename", "name", "project")}
        aliases = [
            {
                "__typename": "ArtifactAlias",
                "id": f"{version.artifact_id}:{alias}",
                "alias": alias,
                "artifactCollection": collection,
            }
            for alias in version.aliases
        ]
        node.update(
            id=version.artifact_id,
            metadata=version.metadata,
            state=version.state,
            size=sum(map(len, files)),
            digest=version.digest,
            fileCount=len(files),
            aliases=aliases,
        )
        return node

    def _op_ArtifactByID(self, variables: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            version = self._versions.get(variables["id"])
            return {"artifact": None if version is None else self._logged_node(version)}

    def _op_ArtifactMembershipByName(self, variables: dict[str, Any]) -> dict[str, Any]:
        # Api.artifact("entity/project/name:alias"), which run.use_artifact(name) asks.
        with self._lock:
            version = self._find_version(
                variables["entity"], variables["project"], variables["name"]
            )
            if version is None:
                return {"project": {"artifactCollectionMembership": None}}
            node = self._logged_node(version)
        membership = {
            "__typename": "ArtifactCollectionMembership",
            "id": f"membership-{version.artifact_id}",
            "versionIndex": version.version,
            "createdAt": node["createdAt"],
            "aliases": [{k: a[k] for k in ("__typename", "id", "alias")} for a in node["aliases"]],
            "artifactCollection": node["artifactSequence"],
            "artifact": node,
        }
        return {"project": {"artifactCollectionMembership": membership}}

    def _op_UseArtifact(self, variables: dict[str, Any]) -> dict[str, Any]:
        # run.use_artifact: the run's input artifacts (Run.used_artifacts()) gain the version.
        with self._lock:
            v = self._versions[variables["artifactID"]]
            used = (v.entity, v.project, v.name, v.version, v.artifact_type)
            self._artifacts.setdefault((variables["runName"], "used"), []).append(used)
        return {"useArtifact": {"artifact": {"id": v.artifact_id}}}

    def _op_FetchArtifactManifest(self, variables: dict[str, Any]) -> dict[str, Any]:
        version = self._versions[variables["id"]]
        manifest = {"file": {"directUrl": self._file_url(version, _MANIFEST)}}
        return {"artifact": {"currentManifest": manifest}}

    def _op_GetArtifactMembershipFileUrls(self, variables: dict[str, Any]) -> dict[str, Any]:
        # Artifact.download: where each file of the version is (one page holds them all).
        name = f"{variables['collection']}:{variables['alias']}"
        with self._lock:
            version = self._find_version(variables["entity"], variables["project"], name)
            names = [] if version is None else [n for n in version.files if n != _MANIFEST]
        edges = [
            {"node": {"__typename": "File", "name": n, "directUrl": self._file_url(version, n)}}
            for n in names
            if version is not None  # (for the type checker: no names without a version)
        ]
        page = {"__typename": "PageInfo", "endCursor": None, "hasNextPage": False}
        files = {"pageInfo": page, "edges": edges}
        collection = {"__typename": "ArtifactSequence", "artifactMembership": {"files": files}}
        return {"project": {"artifactCollection": collection}}


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

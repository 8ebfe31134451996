"""The W&B stand-in's runs: what an online run sends while it trains, and what reads it.

As wandb 0.31 sends them:

- ``query RunResumeStatus`` (``wandb.init(resume=...)``: a run made known with
  :meth:`Runs.add_run` is resumed, as ``resume="must"`` needs; any other is new);
- ``mutation UpsertBucket``: ``wandb.init`` creates its run with it (config, tags, state), as
  W&B's server does for a name it does not know; ``Run.update()`` changes a stored run's
  config, tags and notes, then its summary. Every one is kept in ``upserts``;
- ``mutation CreateRunFiles`` (``wandb-metadata.json``, ``requirements.txt``, the config):
  upload URLs on the stand-in, ``PUT /runfiles/<entity>/<project>/<run>/<name>``, kept in memory;
- ``query Run`` (``Api.run(path)``: the run, with ``summaryMetrics`` as a JSON string);
- ``query RunFullHistory`` (``Run.history(pandas=False)``: the rows the run logged, at most
  ``samples`` of them, spread evenly, the last always in; rows come from :meth:`Runs.log_step`
  and from a real run's file stream, its ``wandb-history.jsonl`` lines);
- ``query RunStoppedStatus`` (what W&B Launch's agent, and the provider's wait, ask of a run:
  ``stopped`` once :meth:`Runs.stop_run` was called);
- ``POST /files/<entity>/<project>/<run>/file_stream``, where the run sends its history, logs
  and heartbeats. The answer carries the run's stop flag (``{"stopped": true}`` once
  :meth:`Runs.stop_run` was called): that is the only way wandb-core 0.31 learns that a run
  was stopped in the W&B UI (it sends no other request for it), and the SDK then calls the
  run's ``stop_fn`` when it next asks wandb-core (every 15 s). Of what a request sends, the
  names of its files are kept (as its ``variables``), and whether its answer said ``stopped``.

A mixin of :class:`test_support.wandb_standin.WandbStandin`.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, unquote

if TYPE_CHECKING:
    from test_support.wandb_standin_requests import RecordedRequest

FILE_STREAM_RE = re.compile(r"^/files/([^/]+)/([^/]+)/([^/]+)/file_stream$")
_RUN_FILE_RE = re.compile(r"^/runfiles/([^/]+)/([^/]+)/([^/]+)/(.+)$")


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
    files: dict[str, bytes] = field(default_factory=dict)
    """What the run uploaded through ``CreateRunFiles``, by name."""
    history: list[dict[str, Any]] = field(default_factory=list)
    """The rows the run logged, in order (``query RunFullHistory``)."""

    @property
    def storage_id(self) -> str:
        return base64.b64encode(f"Run:v1:{self.run_id}".encode()).decode()


class Runs:
    """Runs by ``(entity, project, run id)``, and which of them were stopped."""

    _lock: threading.Lock
    api_key: str
    viewer_entity: str
    url: str
    requests: list[RecordedRequest]

    def _init_runs(
        self, any_run_summary: dict[str, Any] | Callable[[str], dict[str, Any]] | None
    ) -> None:
        self.any_run_summary = any_run_summary
        #: The variables of every ``UpsertBucket`` mutation received, in order.
        self.upserts: list[dict[str, Any]] = []
        self._runs: dict[tuple[str, str, str], _Run] = {}
        self._stopped: set[tuple[str, str, str]] = set()

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

    def stop_run(self, entity: str, project: str, run_id: str) -> None:
        """Stop the run as the W&B UI's "Stop run" button does: its file stream answers
        ``stopped`` from now on, and ``query Run`` says so."""
        with self._lock:
            self._stopped.add((entity, project, run_id))

    def log_step(self, entity: str, project: str, run_id: str, step: int, **logged: Any) -> None:
        """The run logs ``step`` now, as a trainer's ``wandb.log`` would: its summary's
        ``_step`` and ``_timestamp`` (the time of the run's last step, epoch seconds), and the
        ``logged`` values (``**{"train/step": 1200}``)."""
        row = {**logged, "_step": step, "_timestamp": time.time()}
        with self._lock:
            run = self._runs[(entity, project, run_id)]
            run.summary.update(row)
            run.history.append(row)

    def file_streams(self, run_id: str) -> list[RecordedRequest]:
        """The file stream requests of a run (by id) received so far."""
        with self._lock:
            return [r for r in self.requests if r.path.endswith(f"/{run_id}/file_stream")]

    def stop_told_by(self, run_id: str) -> list[RecordedRequest]:
        """The requests of a run whose answers told it that it was stopped."""
        return [r for r in self.file_streams(run_id) if r.told_stopped]

    def run(self, entity: str, project: str, run_id: str) -> _Run | None:
        """A run as the stand-in now stores it (after any ``UpsertBucket``)."""
        return self._runs.get((entity, project, run_id))

    def _file_stream(
        self, record: RecordedRequest, run: tuple[str, str, str], files: dict[str, Any]
    ) -> tuple[int, Any]:
        if record.basic_auth_password != self.api_key:
            record.status = 401
            return 401, {"errors": [{"message": "stand-in: wrong or missing API key"}]}
        lines = (files.get("wandb-history.jsonl") or {}).get("content") or []
        with self._lock:
            if run in self._runs:
                self._runs[run].history += [json.loads(line) for line in lines]
            record.told_stopped = run in self._stopped
            return 200, {"stopped": record.told_stopped}

    def _put_run_file(self, path: str, body: bytes) -> bool:
        """Keep a run's file PUT to the URL ``CreateRunFiles`` gave (under the lock)."""
        match = _RUN_FILE_RE.match(path)
        run = match and self._runs.get((unquote(match[1]), unquote(match[2]), unquote(match[3])))
        if not run:
            return False
        run.files[unquote(match[4])] = body
        return True

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

    def _op_RunFullHistory(self, variables: dict[str, Any]) -> dict[str, Any]:
        key = (variables.get("entity"), variables.get("project"), variables.get("name"))
        with self._lock:
            run = self._runs.get(key)  # type: ignore[arg-type]
            rows = list(run.history) if run is not None else []
        if run is None:
            return {"project": None}
        samples = max(1, int(variables.get("samples") or 500))
        if len(rows) > samples:  # evenly spread, the last kept (as W&B's sampling keeps it)
            last, spans = len(rows) - 1, max(1, samples - 1)
            rows = [rows[last - (samples - 1 - i) * last // spans] for i in range(samples)]
        return {"project": {"run": {"history": [json.dumps(row) for row in rows]}}}

    def _op_RunStoppedStatus(self, variables: dict[str, Any]) -> dict[str, Any]:
        entity = variables.get("entityName") or self.viewer_entity
        key = (entity, variables.get("projectName"), variables.get("runId"))
        with self._lock:
            stopped = key in self._stopped
            if key not in self._runs and not stopped:
                return {"project": {"run": None}}
        return {"project": {"run": {"stopped": stopped}}}

    def _run_fragment(self, run: _Run) -> dict[str, Any]:
        stopped = (run.entity, run.project, run.run_id) in self._stopped
        return {
            "projectId": "7",
            "id": run.storage_id,
            "tags": list(run.tags),
            "name": run.run_id,
            "displayName": run.name or run.run_id,
            "sweepName": None,
            # W&B's server shows a run stopped from its UI as "stopping" until the run ends.
            "state": "stopping" if stopped and run.state == "running" else run.state,
            "stopped": stopped,
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
            "historyLineCount": len(run.history),
            "user": {"name": self.viewer_entity, "username": self.viewer_entity},
            "historyKeys": None,
        }

    def _op_UpsertBucket(self, variables: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.upserts.append(dict(variables))
            run = next(
                (r for r in self._runs.values() if r.storage_id == variables.get("id")), None
            )
            if run is None and variables.get("name") and variables.get("project"):
                # wandb.init's first upsert: the server creates the run it names.
                entity = variables.get("entity") or self.viewer_entity
                key = (entity, variables["project"], variables["name"])
                run = self._runs.get(key) or _Run(*key, {}, state="running")
                self._runs[key] = run
            if run is None:
                return {"upsertBucket": None}
            if "summaryMetrics" in variables and variables["summaryMetrics"] is not None:
                run.summary = json.loads(variables["summaryMetrics"] or "{}")
            if variables.get("config") is not None:
                config = json.loads(variables["config"])
                run.config = {k: v["value"] for k, v in config.items() if k != "_wandb"}
            if variables.get("tags") is not None:
                run.tags = list(variables["tags"])
            if "notes" in variables and variables["notes"] is not None:
                run.notes = variables["notes"]
            if variables.get("displayName"):
                run.name = variables["displayName"]
            return {"upsertBucket": {"bucket": self._run_fragment(run), "inserted": True}}

    def _op_CreateRunFiles(self, variables: dict[str, Any]) -> dict[str, Any]:
        where = "/".join(quote(str(variables[k]), safe="") for k in ("entity", "project", "run"))
        files = [
            {"name": name, "uploadUrl": f"{self.url}/runfiles/{where}/{quote(name)}"}
            for name in variables.get("files") or []
        ]
        run_id = base64.b64encode(f"Run:v1:{variables['run']}".encode()).decode()
        return {"createRunFiles": {"runID": run_id, "uploadHeaders": [], "files": files}}

"""W&B helpers the tests share: the stand-in's key and project, a connection to it, an Airflow
task's run context, and an offline run's records."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from airflow_volcano_wandb.hooks import wandb as wandb_hook
from airflow_volcano_wandb.wandb.wandb_run import AirflowRunContext, SecretKeyRef, WandbRunSpec

API_KEY = "standin" + "0123456789abcdef" * 3  # passes the SDK's 40+ character check
ENTITY = "ml-team"
PROJECT = "retraining"
#: The ``wandb`` connection to the stand-in that ``tests/integration``'s ``wandb_standin`` makes.
STANDIN_CONN_ID = "wandb_standin"

BLOCK = 32 * 1024
HEADER = 7  # a chunk's CRC (4 bytes), length (2) and type (1)


def use_wandb_connection(
    monkeypatch: pytest.MonkeyPatch,
    conn_id: str,
    host: str,
    *,
    password: str = API_KEY,
    extra: dict[str, str] | None = None,
) -> str:
    """Define the ``wandb`` connection ``conn_id`` to ``host`` with ``password`` as its key, and
    unset ``WANDB_API_KEY``: the SDK must get its key from the connection, not this machine.
    The waits' clients shared by connection id (``WandbHook.shared``) are forgotten: a test's
    stand-in listens on a port of its own under an id an earlier test used."""
    connection: dict[str, Any] = {"conn_type": "wandb", "host": host, "password": password}
    if extra is not None:
        connection["extra"] = extra
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setattr(wandb_hook, "_shared", {})
    return conn_id


def online_standin_run(run_id: str) -> dict[str, str]:
    """The operator's options for the online W&B run ``run_id`` of ``ml-team``'s
    ``retraining``, through the stand-in's connection."""
    return {
        "wandb_conn_id": STANDIN_CONN_ID,
        "wandb_entity": ENTITY,
        "wandb_project": PROJECT,
        "wandb_mode": "online",
        "wandb_run_id": run_id,
    }


def airflow_run_context(**fields: Any) -> AirflowRunContext:
    """A retried task instance of a manual DAG run; ``fields`` replace what a test sets itself."""
    values: dict[str, Any] = {
        "dag_id": "retrain",
        "dag_run_id": "manual__2026-01-02T03:04:05+00:00",
        "task_id": "train",
        "try_number": 2,
        "logical_date": "2026-01-02T03:04:05+00:00",
        "task_url": "http://airflow.local/dags/retrain/runs/manual__x/tasks/train",
    }
    return AirflowRunContext(**{**values, **fields})


def keyed_run_spec(context: AirflowRunContext, **options: Any) -> WandbRunSpec:
    """The task instance's run whose API key the pods read from the job's Secret."""
    secret = SecretKeyRef("wandb-key", "api-key")
    return WandbRunSpec.for_task_instance(context, api_key_secret=secret, **options)


def read_wandb_records(path: Path) -> Iterator[Any]:
    """Yield the protobuf records of an offline run's ``.wandb`` file.

    wandb 0.31 ships no Python reader for it (wandb-core writes the file), and
    ``files/config.yaml`` is only written when a run syncs, so this reads the format directly:
    a 7-byte header (``:W&B``, magic, version) and then LevelDB's log format (32 KiB blocks of
    7-byte-headed chunks of type 1=full, 2=first, 3=middle, 4=last), each record a serialised
    ``wandb_internal_pb2.Record``.
    """
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        if left < HEADER:  # block trailer padding
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 0:  # zero padding: skip to the next block
            pos += (BLOCK - pos % BLOCK) % BLOCK
            continue
        if kind in (2, 3):  # FIRST, MIDDLE
            pending += chunk
            continue
        record = wandb_internal_pb2.Record()
        record.ParseFromString(pending + chunk)  # FULL, or LAST after FIRST/MIDDLE
        pending = b""
        yield record

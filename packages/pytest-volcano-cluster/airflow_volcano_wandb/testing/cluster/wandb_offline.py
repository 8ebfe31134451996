"""Read an offline W&B run's summary from its ``run-<id>.wandb`` file, as ``wandb sync`` would.

The file is a 7-byte header (``:W&B``, a magic number, a version) and then LevelDB's log
format: 32 KiB blocks of chunks, each a 7-byte header (CRC, length, type: FULL, or FIRST,
MIDDLE... LAST for a record split across blocks) and the bytes of a protobuf ``Record``.
wandb's SDK no longer ships a Python reader (the Go core reads it), so this small one is here:
the summary is the ``summary`` records' updates applied in order.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

HEADER_BYTES = 7
BLOCK_BYTES = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")  # crc32c, length, type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def records(data: bytes) -> list[bytes]:
    """The serialized records of a ``.wandb`` file's bytes, in order."""
    if not data.startswith(b":W&B"):
        raise ValueError("not a W&B run file")
    found, pending, pos = [], b"", HEADER_BYTES
    while pos + CHUNK_HEADER.size <= len(data):
        left_in_block = BLOCK_BYTES - pos % BLOCK_BYTES
        if left_in_block < CHUNK_HEADER.size:  # a block's zero-filled tail
            pos += left_in_block
            continue
        _crc, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        if kind == 0 and length == 0:  # padding up to the next block
            pos += left_in_block
            continue
        start = pos + CHUNK_HEADER.size
        pending += data[start : start + length]
        pos = start + length
        if kind in (FULL, LAST):
            found.append(pending)
            pending = b""
    return found


def summary(run_file: Path) -> dict[str, Any]:
    """The run's final summary (``wandb.run.summary``): metric name to value."""
    from wandb.proto import wandb_internal_pb2

    result: dict[str, Any] = {}
    for raw in records(run_file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") != "summary":
            continue
        for item in record.summary.update:
            result[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        for item in record.summary.remove:
            result.pop(item.key or "/".join(item.nested_key), None)
    return result


def history(run_file: Path) -> list[dict[str, Any]]:
    """The run's history rows (``wandb.log`` calls), in order: metric name to value."""
    from wandb.proto import wandb_internal_pb2

    rows = []
    for raw in records(run_file.read_bytes()):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        if record.WhichOneof("record_type") == "history":
            rows.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    return rows


def find_run_files(wandb_dir: Path, run_id: str) -> list[Path]:
    """``run-<id>.wandb`` of every offline run with that id under ``wandb_dir``, oldest first
    (a resumed run written offline is a second directory under the same id)."""
    return sorted(wandb_dir.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))


def find_run_file(wandb_dir: Path, run_id: str) -> Path | None:
    """``run-<id>.wandb`` of the newest offline run with that id under ``wandb_dir``."""
    runs = find_run_files(wandb_dir, run_id)
    return runs[-1] if runs else None

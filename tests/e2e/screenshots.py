"""The README's pictures of the Airflow UI, stamped with the DAG they show.

A picture is taken by the end-to-end test from the manual DAG as it was then; when the DAG,
its template or its variables change, the picture no longer shows what a user sees. So each
picture carries, in a PNG text chunk, the digest of those files (:func:`dag_digest`), and
tests/repo/test_readme_pictures.py fails when a picture's digest is not today's.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
#: What the pictures show: the manual DAG, its template and its template variables.
SHOWN = (
    "dags/volcano_pytorch_manual.py",
    "dags/templates/volcano-pytorch-manual.yaml",
    "dags/templates/volcano-pytorch-manual.variables.json",
)
STAMP_KEY = b"avw-dag-sha256"


def dag_digest() -> str:
    """The digest of what the pictures show, as it is in this checkout."""
    digest = hashlib.sha256()
    for name in SHOWN:
        digest.update(name.encode() + b"\0" + (REPO / name).read_bytes() + b"\0")
    return digest.hexdigest()


def stamp(picture: Path, digest: str) -> None:
    """Write ``digest`` into the PNG ``picture`` as a ``tEXt`` chunk after its header."""
    data = picture.read_bytes()
    body = STAMP_KEY + b"\0" + digest.encode()
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + body) & 0xFFFFFFFF)
    header_end = 8 + 4 + 4 + 13 + 4  # the signature, then IHDR (length, type, data, CRC)
    picture.write_bytes(data[:header_end] + chunk + data[header_end:])


def stamped_digest(picture: Path) -> str | None:
    """The digest a picture was stamped with; ``None`` when it has none."""
    data, at = picture.read_bytes(), 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        if kind == b"tEXt":
            key, _, value = data[at + 8 : at + 8 + length].partition(b"\0")
            if key == STAMP_KEY:
                return value.decode()
        at += 12 + length
    return None

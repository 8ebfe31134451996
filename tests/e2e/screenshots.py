"""The README's pictures of the Airflow UI, stamped with what produced what they show.

A picture is taken by the end-to-end test from the manual DAG, its template and the provider's
log lines as they were then; when any of them changes, the picture may no longer show what a
user sees. So each picture carries, in a PNG text chunk, the digest of those files
(:func:`dag_digest` over :data:`SHOWN`), and tests/repo/test_readme_pictures.py fails when a
picture's digest is not today's. The trigger form's picture also carries the titles of the
form's fields it shows (:data:`SHOWS_KEY`), so its caption can name only those.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
#: What produces what the pictures show: the manual DAG, its template and its template
#: variables (the form, the job); the provider modules whose lines the wait task's log shows
#: (the window's line, the trigger's phases and progress, the master's followed lines, the
#: report on success: GPU-seconds, the link back, the job's deletion, the throughput); the
#: extra link; and the Training tab.
SHOWN = (
    "dags/volcano_pytorch_manual.py",
    "dags/templates/volcano-pytorch-manual.yaml",
    "dags/templates/volcano-pytorch-manual.variables.json",
    "airflow_volcano_wandb/parts/waiter.py",
    "airflow_volcano_wandb/parts/finish.py",
    "airflow_volcano_wandb/triggers/volcano.py",
    "airflow_volcano_wandb/wait/step_io.py",
    "airflow_volcano_wandb/wait/outcome.py",
    "airflow_volcano_wandb/wait/training_progress.py",
    "airflow_volcano_wandb/logs/master_log.py",
    "airflow_volcano_wandb/wait/job_report.py",
    "airflow_volcano_wandb/job/gpu_usage.py",
    "airflow_volcano_wandb/job/deletion.py",
    "airflow_volcano_wandb/wandb/wandb_backlink.py",
    "airflow_volcano_wandb/parts/wandb_report.py",
    "airflow_volcano_wandb/links/wandb.py",
    # The Training tab's picture (tests/e2e/test_training_tab_e2e.py): its model and page.
    "airflow_volcano_wandb/ui/training_view.py",
    "airflow_volcano_wandb/ui/static/task.html",
    "airflow_volcano_wandb/ui/static/training.js",
    "airflow_volcano_wandb/ui/static/training.css",
)
STAMP_KEY = b"avw-dag-sha256"
#: The trigger form's field titles: those the picture shows, and all of them.
SHOWS_KEY = b"avw-shows"


def dag_digest() -> str:
    """The digest of what the pictures show, as it is in this checkout."""
    digest = hashlib.sha256()
    for name in SHOWN:
        digest.update(name.encode() + b"\0" + (REPO / name).read_bytes() + b"\0")
    return digest.hexdigest()


def stamp(picture: Path, digest: str) -> None:
    """Write ``digest`` into the PNG ``picture``."""
    _write_text(picture, STAMP_KEY, digest)


def stamp_shows(picture: Path, shown: list[str], every: list[str]) -> None:
    """Write the titles of the fields ``picture`` shows, and of ``every`` field, into it."""
    _write_text(picture, SHOWS_KEY, json.dumps({"shown": shown, "every": every}))


def stamped_digest(picture: Path) -> str | None:
    """The digest a picture was stamped with; ``None`` when it has none."""
    return _read_text(picture, STAMP_KEY)


def stamped_shows(picture: Path) -> dict[str, Any] | None:
    """``{"shown": [...], "every": [...]}`` of a form's picture; ``None`` when it has none."""
    text = _read_text(picture, SHOWS_KEY)
    return None if text is None else json.loads(text)


def visible_field_titles(browser: Any, dialog: Any) -> tuple[list[str], list[str]]:
    """The titles of the form's fields whose label lies wholly in the browser's window, and of
    every field: what a picture taken now shows of the form."""
    from selenium.webdriver.common.by import By

    labels = dialog.find_elements(By.CSS_SELECTOR, "[id^='field::'][id$='::label']")
    inside = (
        "const r = arguments[0].getBoundingClientRect();"
        "return r.top >= 0 && r.bottom <= window.innerHeight;"
    )
    every = [label.text.replace("*", "").strip() for label in labels]
    shown = [
        title
        for title, label in zip(every, labels, strict=True)
        if browser.execute_script(inside, label)
    ]
    return shown, every


def _write_text(picture: Path, key: bytes, text: str) -> None:
    """A ``tEXt`` chunk after the PNG's header (the signature, then IHDR)."""
    data = picture.read_bytes()
    body = key + b"\0" + text.encode()
    chunk = struct.pack(">I", len(body)) + b"tEXt" + body
    chunk += struct.pack(">I", zlib.crc32(b"tEXt" + body) & 0xFFFFFFFF)
    header_end = 8 + 4 + 4 + 13 + 4  # the signature, then IHDR (length, type, data, CRC)
    picture.write_bytes(data[:header_end] + chunk + data[header_end:])


def _read_text(picture: Path, key: bytes) -> str | None:
    data, at = picture.read_bytes(), 8
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at : at + 8])
        if kind == b"tEXt":
            found, _, value = data[at + 8 : at + 8 + length].partition(b"\0")
            if found == key:
                return value.decode()
        at += 12 + length
    return None

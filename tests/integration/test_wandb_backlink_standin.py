"""``wandb_backlink.link_back`` writes the Airflow task into its W&B run, through the real
``wandb`` SDK against the local stand-in (fixtures ``standin`` and ``conn_id`` in
``conftest.py``), and never holds or fails the task when W&B cannot take it.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from airflow_volcano_wandb.hooks import WandbHook
from airflow_volcano_wandb.wandb import wandb_backlink
from test_support.wandb_standin import WandbStandin
from test_support.wandb_standin_seed import RUN_ID, SUMMARY
from test_support.wandb_support import (
    API_KEY,
    ENTITY,
    PROJECT,
    airflow_run_context,
    use_wandb_connection,
)

TASK = airflow_run_context(
    dag_run_id="scheduled__2026-11-30",
    logical_date=None,
    task_url="http://airflow.example/dags/retrain/runs/scheduled__2026-11-30/tasks/train",
)


def _link_back(hook: WandbHook, outcome: str, **options: Any) -> bool:
    """``link_back`` of TASK's run with a key, as the operator calls it; ``options`` replace
    the run's id and the connection's entity, project and mode (None: the connection's)."""
    arguments: dict[str, Any] = {
        "run_id": RUN_ID,
        "entity": None,
        "project": None,
        "mode": None,
        "has_key": True,
        "log": logging.getLogger("test.link_back"),
    }
    return wandb_backlink.link_back(hook, TASK, outcome, **{**arguments, **options})


def test_link_back_writes_the_task_into_the_run_against_wandb_standin(
    standin: WandbStandin, conn_id: str, capfd: pytest.CaptureFixture[str]
) -> None:
    hook = WandbHook(conn_id)
    linked = _link_back(hook, "failed")
    assert linked
    run = standin.run(ENTITY, PROJECT, RUN_ID)
    assert run.config == {"lr": 0.01, "airflow": wandb_backlink.airflow_record(TASK, "failed")}
    assert run.tags == ["airflow", "airflow-failed"]
    assert run.notes.splitlines() == [
        f"Airflow task: {TASK.task_url} (DAG run {TASK.dag_run_id}, try 2: failed)"
    ]
    assert run.summary == SUMMARY  # written back as read: untouched
    # A later try that succeeds replaces the outcome: one record, one outcome tag.
    assert _link_back(hook, "success", entity=ENTITY, project=PROJECT, mode="online")
    assert run.config["airflow"]["outcome"] == "success"
    assert run.tags == ["airflow", "airflow-success"]
    assert len(run.notes.splitlines()) == 1 and run.notes.endswith("success)")
    assert API_KEY not in "".join(repr(u) for u in standin.upserts)
    captured = capfd.readouterr()
    assert API_KEY not in captured.out + captured.err


def test_link_back_of_a_resumed_try_says_so_in_the_run_against_wandb_standin(
    standin: WandbStandin, conn_id: str
) -> None:
    """The operator hands the resume's facts from its return value (None: not known); the run
    gets them in its ``airflow`` entry and a notes line, through the W&B public API."""
    resumed = {
        "resumed_from_intent": 1,
        "resumed_from_step": 593,
        "resumed_from_checkpoint": f"/checkpoints/{RUN_ID}/step-000000593.pt",
        "resume_saved_gpu_seconds": 39505.9,
    }
    assert _link_back(
        WandbHook(conn_id),
        "success",
        entity=ENTITY,
        project=PROJECT,
        mode="online",
        resumed=resumed,
    )
    run = standin.run(ENTITY, PROJECT, RUN_ID)
    assert run.config["airflow"] == {**wandb_backlink.airflow_record(TASK, "success"), **resumed}
    assert run.notes.splitlines()[0] == (
        f"Resumed from step 593 (checkpoint /checkpoints/{RUN_ID}/step-000000593.pt): "
        "39505.9 GPU-seconds saved"
    )
    assert run.notes.splitlines()[1].startswith("Airflow task:")


def _link_back_online(
    hook: WandbHook, run_id: str, caplog: pytest.LogCaptureFixture
) -> tuple[bool, str]:
    """``link_back`` of an online run with a key: whether it linked, and what it logged."""
    with caplog.at_level(logging.INFO, logger="test.link_back"):
        linked = _link_back(hook, "success", run_id=run_id)
    return linked, caplog.text


def test_link_back_never_fails_the_task_against_wandb_standin(
    standin: WandbStandin,
    conn_id: str,
    caplog: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    linked, logged = _link_back_online(WandbHook(conn_id), "no-such-run", caplog)
    assert not linked
    assert "Could not write the Airflow link into W&B run no-such-run" in logged
    assert not standin.upserts
    assert API_KEY not in caplog.text + "".join(capfd.readouterr())


@pytest.mark.parametrize(
    ("mode", "has_key", "why"),
    [
        ("offline", True, "W&B mode is offline"),
        ("disabled", True, "W&B mode is disabled"),
        (None, False, "no W&B API key"),
    ],
)
def test_link_back_offline_is_one_clear_line_against_wandb_standin(
    standin: WandbStandin, conn_id: str, caplog: pytest.LogCaptureFixture, mode, has_key, why
) -> None:
    with caplog.at_level(logging.INFO, logger="test.link_back"):
        linked = _link_back(WandbHook(conn_id), "success", mode=mode, has_key=has_key)
    assert not linked
    assert [r.getMessage() for r in caplog.records] == [
        f"{why}: the Airflow task is not linked from the W&B run {RUN_ID} (the trainer still "
        "gets AVW_AIRFLOW_TASK_URL)"
    ]
    assert standin.operations() == []  # not even a connection attempt


@pytest.fixture
def silent_wandb(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A W&B connection to a server that accepts connections and never answers."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(server.accept()[0])

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    host = f"http://127.0.0.1:{server.getsockname()[1]}"
    yield use_wandb_connection(
        monkeypatch, "wandb_silent", host, extra={"entity": ENTITY, "project": PROJECT}
    )
    stop.set()
    acceptor.join()
    for conn in held:
        conn.close()
    server.close()


@pytest.mark.timeout(120)
def test_a_silent_w_and_b_cannot_hold_the_link_back_past_the_deadline(
    silent_wandb: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's own timeout and retries alone would hold this call for minutes."""
    hook = WandbHook(silent_wandb, timeout=30, deadline=3)
    linked, logged = _link_back_online(hook, RUN_ID, caplog)
    assert not linked
    assert "TimeoutError" in logged and "within 3 s" in logged, logged
    with pytest.raises(TimeoutError, match="get_run_summary gave no answer within 3 s"):
        hook.get_run_summary(RUN_ID)

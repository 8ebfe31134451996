"""One W&B client per connection for the waits of a process (``WandbHook.shared``), each read
still of the run as W&B has it now: ``wandb.Api`` answers a run it loaded from its cache. Against
the real SDK and the W&B stand-in: tests/integration/test_wandb_hook_standin.py."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from airflow_volcano_wandb.hooks import wandb as wandb_hook
from airflow_volcano_wandb.hooks.wandb import WandbHook
from airflow_volcano_wandb.wait import wandb_progress
from airflow_volcano_wandb.wait.judge import WandbRunRef
from tests.unit.hooks.test_wandb_hook import KEY, define


class Server:
    """W&B's side: each run's summary now, the clients made and the runs loaded."""

    def __init__(self) -> None:
        self.summaries: dict[str, dict] = {}
        self.clients: list[str | None] = []  # each client's key
        self.loads = 0
        self.lock = threading.Lock()

    def step(self, path: str, step: int) -> None:
        self.summaries[path] = {"train/step": step, "_timestamp": 1.0e9 + step}


class Run:
    def __init__(self, server: Server, path: str) -> None:
        self.server, self.path = server, path
        self.load(force=True)  # wandb's Run loads as it is made

    def load(self, force: bool = False) -> None:
        if force:
            with self.server.lock:
                self.server.loads += 1
            self.summary_metrics = dict(self.server.summaries[self.path])


class CachingApi:
    """What the hook uses of ``wandb.Api``, as wandb 0.31 does it: ``run(path)`` loads a run
    once and answers it from its cache after."""

    def __init__(self, server: Server) -> None:
        self.server, self._runs = server, {}

    def run(self, path: str) -> Run:
        if path not in self._runs:
            self._runs[path] = Run(self.server, path)
        return self._runs[path]


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Server:
    """Every hook's client talks to one ``Server``; making one takes a while (its key is
    checked), and this process shares no hook from an earlier test."""
    server = Server()

    def get_conn(self: WandbHook) -> CachingApi:
        time.sleep(0.05)  # as a key check does: the waits' first reads arrive meanwhile
        with server.lock:
            server.clients.append(self.api_key)
        return CachingApi(server)

    monkeypatch.setattr(WandbHook, "get_conn", get_conn)
    monkeypatch.setattr(wandb_hook, "_shared", {})
    return server


def _lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The connections read from Airflow from now on, by id."""
    read, looked_up = WandbHook.get_connection, []

    def counted(conn_id: str):
        looked_up.append(conn_id)
        return read(conn_id)

    monkeypatch.setattr(WandbHook, "get_connection", staticmethod(counted))
    return looked_up


def _read(run: WandbRunRef) -> dict:
    return wandb_progress._read(run, "get_run_summary")


def test_the_waits_of_a_process_read_through_one_client_per_connection(server, monkeypatch):
    define(monkeypatch, "wandb_a", password=KEY, extra={"entity": "e", "project": "p"})
    define(monkeypatch, "wandb_b", password="b" + KEY, extra={"entity": "e", "project": "p"})
    looked_up = _lookups(monkeypatch)
    runs = [WandbRunRef("wandb_a", f"r{i}", "e", "p") for i in range(20)]
    for run in runs:
        server.step(f"e/p/{run.run_id}", 1)
    with ThreadPoolExecutor(8) as pool:  # the triggerer's threads, all reading at once
        answers = list(pool.map(_read, runs * 3))
    assert [a["train/step"] for a in answers] == [1] * 60
    assert server.clients == [KEY] and looked_up == ["wandb_a"]
    _read(WandbRunRef("wandb_b", "r0", "e", "p"))  # another connection: a client of its own
    assert server.clients == [KEY, "b" + KEY] and looked_up == ["wandb_a", "wandb_b"]


def test_each_read_through_the_shared_client_is_of_the_run_as_w_and_b_has_it_now(
    server, monkeypatch
):
    define(monkeypatch, "wandb_a", password=KEY)
    run = WandbRunRef("wandb_a", "r1", "e", "p")
    for step in (100, 250, 400):
        server.step("e/p/r1", step)
        assert _read(run)["train/step"] == step
    assert server.loads == 3  # one load per read: the cached run loaded again, not twice
    assert len(server.clients) == 1


def test_a_shared_client_is_made_again_in_time_to_see_a_changed_key(server, monkeypatch):
    define(monkeypatch, "wandb_a", password=KEY)
    server.step("e/p/r1", 1)
    run, clock = WandbRunRef("wandb_a", "r1", "e", "p"), [1000.0]
    monkeypatch.setattr(wandb_hook.time, "monotonic", lambda: clock[0])
    _read(run)
    define(monkeypatch, "wandb_a", password="rotated" + KEY)
    clock[0] += wandb_hook.SHARED_HOOK_SECONDS - 1
    _read(run)
    assert server.clients == [KEY]
    clock[0] += 1
    _read(run)
    assert server.clients == [KEY, "rotated" + KEY]


def test_a_connection_without_a_key_is_still_not_asked(server, monkeypatch):
    define(monkeypatch, "wandb_nokey")
    with pytest.raises(LookupError, match="no API key"):
        _read(WandbRunRef("wandb_nokey", "r1", None, "p"))
    assert server.clients == []

"""The deferred master-log follow: opt-in, capped per triggerer, restart-aware, harmless."""

from __future__ import annotations

import asyncio
import contextlib
import itertools

import pytest

from airflow_volcano_wandb.job.ownership import MANAGED_BY, MANAGED_BY_LABEL
from airflow_volcano_wandb.logs import master_log
from airflow_volcano_wandb.logs.secret_digest import SecretDigest
from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
from airflow_volcano_wandb.operators.operator_parts import OperatorParts
from airflow_volcano_wandb.wandb.key_forms import key_forms
from test_support.line_log import LineLog

KEY = "0123456789abcdef0123456789abcdef01234567"


def test_at_most_the_configured_follows_run_at_once_and_a_waiting_one_says_so(monkeypatch):
    monkeypatch.setattr(master_log, "max_concurrent_follows", lambda: 2)
    log = LineLog()
    running, most = 0, 0

    async def follow(i: int, release: asyncio.Event) -> None:
        nonlocal running, most
        async with master_log.follow_slot(log, f"ns/job-{i}"):
            running += 1
            most = max(most, running)
            await release.wait()
            running -= 1

    async def main() -> None:
        release = asyncio.Event()
        tasks = [asyncio.create_task(follow(i, release)) for i in range(5)]
        for _ in range(5):
            await asyncio.sleep(0)
        assert running == 2
        release.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert most == 2
    waiting = [line for line in log.lines if line.startswith("Waiting for a free master-log")]
    assert len(waiting) == 3  # one line per job that had to wait, none for the first two
    assert "ns/job-2" in waiting[0]


def test_the_limit_is_read_from_the_airflow_config_once(monkeypatch):
    master_log.max_concurrent_follows.cache_clear()
    monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__MAX_CONCURRENT_LOG_FOLLOWS", "7")
    try:
        assert master_log.max_concurrent_follows() == 7
        monkeypatch.setenv("AIRFLOW__VOLCANO_WANDB__MAX_CONCURRENT_LOG_FOLLOWS", "9")
        assert master_log.max_concurrent_follows() == 7
    finally:
        master_log.max_concurrent_follows.cache_clear()


def _pod(uid: str = "u1", restarts: int = 0, running: bool = True) -> dict:
    state = {"running": {}} if running else {"terminated": {"exitCode": 1}}
    return {
        "metadata": {
            "name": "j-master-0",
            "uid": uid,
            "labels": {"volcano.sh/task-spec": "master"},
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "main", "restartCount": restarts, "state": state}],
        },
    }


class _Stream:
    """An aiohttp-like response: chunks, then (unless ``open_ended``) the end of the stream."""

    def __init__(self, chunks: list[bytes], open_ended: bool = False) -> None:
        self._chunks = list(chunks)
        self._open_ended = open_ended
        self.content = self
        self.closed = False

    async def readany(self) -> bytes:
        if self._chunks:
            return self._chunks.pop(0)
        if self._open_ended:
            await asyncio.Event().wait()  # silence, as a follow of a quiet container
        return b""

    def close(self) -> None:
        self.closed = True


class _Hook:
    def __init__(self, pods: list[dict], streams: list[_Stream]) -> None:
        self.pods, self.streams, self.opened = pods, streams, []
        self.listed = 0

    @contextlib.asynccontextmanager
    async def get_conn(self):
        yield object()

    async def read_job(self, api, name, namespace):
        return {"spec": {"tasks": [{"name": "master"}, {"name": "worker"}]}}

    async def list_job_pods(self, api, name, namespace):
        self.listed += 1
        return [self.pods[0] if len(self.pods) == 1 else self.pods.pop(0)]

    async def open_pod_log(self, api, pod, namespace, container):
        stream = self.streams.pop(0)
        self.opened.append(stream)
        return stream


def _follow(
    hook: _Hook,
    log: LineLog,
    max_lines: int = 100,
    seconds: float = 1.0,
    masked: tuple[SecretDigest, ...] = (),
    **options: object,
) -> None:
    async def main() -> None:
        follow = master_log.follow_master_log
        task = asyncio.create_task(
            follow(lambda: hook, "j", "ns", log, max_lines, 10_000, masked, **options)
        )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), seconds)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


@pytest.fixture(autouse=True)
def quick_rechecks(monkeypatch):
    monkeypatch.setattr(master_log, "RECHECK_SECONDS", 0.05)


def test_lines_are_joined_prefixed_with_the_pod_and_stamps_dropped():
    stream = _Stream(
        [b"2026-01-01T00:00:01Z epoch 1 lo", b"ss 0.5\n2026-01-01T00:00:02Z done\n"], True
    )
    hook, log = _Hook([_pod()], [stream]), LineLog()
    _follow(hook, log)
    assert log.lines == ["[j-master-0] epoch 1 loss 0.5", "[j-master-0] done"]
    assert stream.closed


def test_a_trainer_that_prints_its_key_has_it_masked():
    stream = _Stream([f"2026-01-01T00:00:01Z WANDB_API_KEY={KEY} rank=0\n".encode()], True)
    hook, log = _Hook([_pod()], [stream]), LineLog()
    _follow(hook, log, masked=(SecretDigest.of(KEY),))
    assert log.lines == ["[j-master-0] WANDB_API_KEY=*** rank=0"]


def test_the_keys_base64_and_basic_credentials_are_masked_too():
    """What the operator hands the trigger (a digest per form) masks each form it prints."""
    _, b64, basic = key_forms(KEY)
    lines = f"2026-01-01T00:00:01Z key64={b64}\n2026-01-01T00:00:02Z Authorization: Basic {basic}\n"
    stream = _Stream([lines.encode()], True)
    hook, log = _Hook([_pod()], [stream]), LineLog()
    op = VolcanoPyTorchJobOperator(task_id="t", template="seed.yaml", follow_master_log=True)
    digests = [
        SecretDigest.from_json(d)
        for d in OperatorParts.of(op).logs.trigger_kwargs([KEY])["masked_secrets"]
    ]
    _follow(hook, log, masked=tuple(digests))
    assert log.lines == ["[j-master-0] key64=***", "[j-master-0] Authorization: Basic ***"]


def test_a_change_of_the_job_wakes_a_follow_waiting_for_the_master_pod(monkeypatch):
    """The trigger sets ``job_changed`` when a rank starts: the follow looks at once, not
    after ``RECHECK_SECONDS`` (here an hour: only the wake-up can show the line)."""
    monkeypatch.setattr(master_log, "RECHECK_SECONDS", 3600)
    pending = _pod()
    pending["status"] = {"phase": "Pending"}
    stream = _Stream([b"2026-01-01T00:00:01Z started\n"], True)
    hook, log = _Hook([pending, _pod()], [stream]), LineLog()
    job_changed = asyncio.Event()

    async def main() -> None:
        follow = master_log.follow_master_log(
            lambda: hook, "j", "ns", log, 100, 10_000, (), job_changed
        )
        task = asyncio.create_task(follow)
        while not hook.listed:  # the first look found the master pending
            await asyncio.sleep(0.01)
        job_changed.set()  # as the trigger does on "Running: master 1/1"
        for _ in range(2000):
            if log.lines:
                break
            await asyncio.sleep(0.01)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert log.lines == ["[j-master-0] started"]


def test_a_restarted_container_is_followed_again_without_repeating_lines():
    first = _Stream([b"2026-01-01T00:00:01Z a\n2026-01-01T00:00:02Z b\n"], True)
    # The same file, replayed from the start, then the restarted container's lines.
    again = _Stream(
        [b"2026-01-01T00:00:01Z a\n2026-01-01T00:00:02Z b\n2026-01-01T00:00:05Z c\n"], True
    )
    pods = [_pod(restarts=0), _pod(restarts=0), _pod(restarts=1)]
    hook, log = _Hook(pods, [first, again]), LineLog()
    _follow(hook, log, seconds=2.5)
    shown = [line for line in log.lines if line.startswith("[j-master-0]")]
    assert shown == ["[j-master-0] a", "[j-master-0] b", "[j-master-0] c"]
    assert "Following the log of j-master-0 again: it restarted" in log.lines
    assert first.closed and again.closed


def test_the_cap_ends_the_follow_with_one_notice():
    stream = _Stream([b"2026-01-01T00:00:01Z a\n2026-01-01T00:00:02Z b\n"], True)
    hook, log = _Hook([_pod()], [stream]), LineLog()
    _follow(hook, log, max_lines=1)
    assert log.lines == [
        "[j-master-0] a",
        "[j-master-0] ... master log capped at 1 lines (1 bytes); the full log is in the pod",
    ]


@pytest.mark.parametrize("read", [True, False])
def test_progress_records_give_progress_lines_at_their_stamps_rate(read):
    """A trainer without W&B: its ``AVW_PROGRESS`` records (a replayed backlog here) give the
    lines a W&B run's summary would, the rate from the kubelet's stamps; not read when the
    wait reads W&B's (``progress=False``), they are only shown."""
    records = "".join(
        f'2026-01-01T00:00:{10 * i}Z AVW_PROGRESS {{"step": {100 * i}, "total_steps": 400}}\n'
        for i in (1, 2, 3)
    )
    hook, log = _Hook([_pod()], [_Stream([records.encode()], True)]), LineLog()
    _follow(hook, log, progress=read)
    assert len(log.of("j-master-0")) == 3
    assert [line for line in log.lines if not line.startswith("[j-master-0] AVW_")] == [
        "progress: step 100/400 (25 %)",
        "progress: step 200/400 (50 %), 10 steps/s, ETA 20 s",
        "progress: step 300/400 (75 %), 10 steps/s, ETA 10 s",
    ][: 3 if read else 0]


def test_errors_are_logged_and_retried_never_raised():
    class Failing(_Hook):
        calls = 0

        async def read_job(self, api, name, namespace):
            Failing.calls += 1
            raise RuntimeError("apiserver down")

    log = LineLog()
    _follow(Failing([_pod()], []), log, seconds=0.5)
    assert Failing.calls >= 2
    assert "apiserver down" in log.lines[0]


class _ListingPodWatch:
    """A pod watch whose LIST is under way, then synced with the master's pod."""

    def __init__(self, pod: dict) -> None:
        self.pod, self.synced = pod, False

    def objects(self, key: str) -> list[dict] | None:
        return [self.pod] if self.synced else None

    @property
    def listing(self) -> bool:
        return not self.synced


def test_a_follow_makes_no_list_of_its_own_while_the_pod_watch_lists():
    class ManagedJobHook(_Hook):
        async def read_job(self, api, name, namespace):
            managed = {"metadata": {"labels": {MANAGED_BY_LABEL: MANAGED_BY}}}
            tasks = [{"name": t, "template": managed} for t in ("master", "worker")]
            return {"spec": {"tasks": tasks}}

    stream = _Stream([b"2026-01-01T00:00:01Z a\n"], True)
    hook, log = ManagedJobHook([_pod()], [stream]), LineLog()
    watch = _ListingPodWatch(_pod())

    async def main() -> list[int]:
        task = asyncio.create_task(
            master_log.follow_master_log(lambda: hook, "j", "ns", log, 100, 10_000, pod_watch=watch)
        )
        await asyncio.sleep(0.3)  # rechecks while the LIST is under way
        listed_while_listing = hook.listed
        watch.synced = True
        await asyncio.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        return [listed_while_listing, hook.listed]

    listed = asyncio.run(main())
    assert listed == [0, 0]
    assert "[j-master-0] a" in log.lines


def test_a_backlog_delivered_at_once_is_shown_a_batch_per_turn_of_the_event_loop():
    """A reopened stream, or a trigger taking over from another triggerer, reads the master's
    log from its start in one chunk: the other triggers of the triggerer run between batches."""
    backlog = b"".join(b"epoch %d\n" % i for i in range(1000))
    hook = _Hook([_pod()], [_Stream([backlog], open_ended=True)])
    log = LineLog()
    shown_at_each_turn = [0]

    async def main() -> None:
        async def other_trigger() -> None:
            while True:
                await asyncio.sleep(0)
                shown_at_each_turn.append(len(log.lines))

        other = asyncio.create_task(other_trigger())
        follow = master_log.follow_master_log
        task = asyncio.create_task(follow(lambda: hook, "j", "ns", log, 10_000, 1 << 20, ()))
        while len(log.lines) < 1000:
            await asyncio.sleep(0)
        for t in (task, other):
            t.cancel()
        await asyncio.gather(task, other, return_exceptions=True)

    asyncio.run(main())
    shown_at_each_turn.append(len(log.lines))
    assert log.of("j-master-0") == [f"epoch {i}" for i in range(1000)]
    batches = [b - a for a, b in itertools.pairwise(shown_at_each_turn)]
    assert max(batches) == master_log.SHOW_BATCH, batches

"""Drive N triggers in one event loop with Airflow's own ``TriggerRunner`` code, and measure.

The triggers go the way a triggerer takes them: ``serialize()``, kwargs encrypted and
decrypted, ``TriggerRunner.create_triggers`` and ``run_trigger``, beside the runner's block
watchdog; no supervisor link (DB sync). Each event is stamped as it is queued. ``--mode``:
``operator`` (every option at the operator's default: ``operator_default_kwargs``), ``watch``
(the bare trigger of the earlier runs: it never reads pods) or ``poll`` (the polling
baseline, ``polling_trigger.py``); ``[volcano_wandb]`` settings come from the environment.

``scale``: start the triggers, let them settle, then measure a window (CPU, RSS, TCP
connections, client requests; ``WINDOW_START``/``WINDOW_END`` lines mark it for the parent's
scrapes). ``latency``: run until every trigger fired (or ``--timeout``). Both print
``SYNCED`` once every shared watch has its first complete LIST, and list in ``api_calls``
every call the hook was asked for, counted before it goes out (so attempts against a stopped
apiserver count too). Started by ``waiters.driver``; one JSON file (``--out``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from collections import deque
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from unfired import dump_on_sigusr1, keep_cancelled, unfired_triggers  # noqa: E402

REQUESTS = {"count": 0}
SHOWN = {"lines": 0}
# Every call of the hook's list/watch/read/delete, as (wall time, verb): counted before the
# call goes out, so attempts that never reach the apiserver (it is down) count too.
API_CALLS: list[tuple[float, str]] = []


def _count_requests() -> None:
    from kubernetes_asyncio.client import rest

    original = rest.RESTClientObject.request

    async def counted(self, *args, **kwargs):
        REQUESTS["count"] += 1
        return await original(self, *args, **kwargs)

    rest.RESTClientObject.request = counted


def _count_hook_calls() -> None:
    """Wrap the async hook's job calls to record each attempt (see ``API_CALLS``)."""
    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook

    def counted_coroutine(verb: str, original):
        async def call(self, *args, **kwargs):
            API_CALLS.append((time.time(), verb))
            return await original(self, *args, **kwargs)

        return call

    def counted_stream(verb: str, original):
        # watch_jobs is an async generator: count when it is called, hand back the same
        # generator, so the watcher's handling of the stream is untouched.
        def call(self, *args, **kwargs):
            API_CALLS.append((time.time(), verb))
            return original(self, *args, **kwargs)

        return call

    for verb, name in (
        ("list", "list_jobs_page"),
        ("get", "read_job"),
        ("delete", "delete_job"),
        ("list_pods", "list_job_pods"),  # a job's pods, for the restart and startup budgets
        ("list_pod_page", "list_pods_page"),  # the pod watch's LIST
    ):
        setattr(AsyncVolcanoHook, name, counted_coroutine(verb, getattr(AsyncVolcanoHook, name)))
    AsyncVolcanoHook.watch_jobs = counted_stream("watch", AsyncVolcanoHook.watch_jobs)
    AsyncVolcanoHook.watch_pods = counted_stream("watch_pods", AsyncVolcanoHook.watch_pods)


def _count_shown_lines() -> None:
    """Count the master log lines the triggers show (each goes through the per-job cap)."""
    from airflow_volcano_wandb.logs.log_lines import LogCap

    original = LogCap.admit

    def counted(self, line):
        shown, notice = original(self, line)
        SHOWN["lines"] += shown
        return shown, notice

    LogCap.admit = counted


class StampedEvents(deque):
    """The runner's outbound event queue, stamping each event as it is queued."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[tuple[float, int, dict]] = []

    def append(self, entry) -> None:
        self.stamps.append((time.time(), entry.trigger_id, entry.event.payload))
        super().append(entry)


def apiserver_connections(port: int) -> int:
    proc = psutil.Process()
    return sum(
        1
        for c in proc.net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def load_jobs(path: str, limit: int) -> list[dict]:
    """The jobs file: a JSON list of names, or of ``{"name", "uid"}`` as the operator knows
    them after submitting (the trigger then waits on that submission only)."""
    entries = json.loads(Path(path).read_text())[:limit]
    return [e if isinstance(e, dict) else {"name": e} for e in entries]


def operator_default_kwargs(job: dict, follow: bool) -> dict:
    """What the operator's deferred trigger carries when a DAG sets none of the wait's options
    (``Waiter.trigger``): the submission's uid, try 1, the parts' defaults (the restart
    budget of 3 and the 120 s startup budget of ``RunLimits``, ``poll_interval`` 10 s, the
    watch's failure grace), deferred now. Built from the parts themselves, so a default that
    changes there changes here."""
    from airflow_volcano_wandb.operators.operator_parts import OperatorWait
    from airflow_volcano_wandb.parts.connection import Connection
    from airflow_volcano_wandb.parts.job_wait import JobWait
    from airflow_volcano_wandb.parts.limits import RunLimits
    from airflow_volcano_wandb.parts.log_follow import LogFollow

    wait, own = JobWait(), OperatorWait()
    now = time.time()
    return {
        "job_uid": job.get("uid"),
        **Connection().kwargs(),
        "pending_timeout": wait.pending_timeout,
        "deadline": None,  # no execution_timeout
        "poll_interval": own.poll_interval,
        "watch_failure_grace": wait.watch_failure_grace,
        "try_number": 1,
        **LogFollow().trigger_kwargs((), follow=follow),
        "deferred_at": now,
        "waiting_since": now,
        **RunLimits().trigger_kwargs(),
    }


def make_trigger(mode: str, job: dict, namespace: str, interval: float, follow: bool = False):
    """``operator``: the provider's trigger as the operator defers it by default; ``watch``:
    as the earlier benchmarks made it (no restart budget, no startup budget: no pod reads, no
    settle); ``poll``: the polling baseline."""
    name = job["name"]
    if mode == "operator":
        from airflow_volcano_wandb.triggers import VolcanoJobTrigger

        return VolcanoJobTrigger(
            job_name=name, namespace=namespace, **operator_default_kwargs(job, follow)
        )
    if mode == "watch":
        from airflow_volcano_wandb.triggers import VolcanoJobTrigger

        if job.get("uid"):  # as the operator defers: this submission, by try 1
            return VolcanoJobTrigger(
                job_name=name,
                namespace=namespace,
                job_uid=job["uid"],
                try_number=1,
                follow_master_log=follow,
            )
        return VolcanoJobTrigger(job_name=name, namespace=namespace, follow_master_log=follow)
    from bench.polling_trigger import PollingVolcanoJobTrigger

    return PollingVolcanoJobTrigger(job_name=name, namespace=namespace, poll_interval=interval)


def _watches() -> list:
    """The event loop's shared watches, job and pod watches alike."""
    from airflow_volcano_wandb.wait import namespace_watch

    return list(namespace_watch._watches.values())


async def first_sync(started: float, printed: list[bool]) -> None:
    """Record when every shared watch (jobs', and pods' where there is a pod watch) first has
    its complete LIST in (and say SYNCED)."""
    while True:
        watchers = _watches()
        if watchers and all(w.synced.is_set() for w in watchers):
            printed.append(time.time() - started)
            print("SYNCED", flush=True)
            return
        await asyncio.sleep(0.01)


def watch_counts() -> tuple[int, int]:
    """The shared job watches and all shared watches this process holds now."""
    from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher

    watches = _watches()
    return sum(isinstance(w, NamespaceJobWatcher) for w in watches), len(watches)


async def drive(options: argparse.Namespace) -> dict:
    from airflow.executors.workloads.trigger import RunTrigger
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.models.trigger import Trigger

    from airflow_volcano_wandb.triggers import VolcanoJobTrigger  # noqa: F401  (imported before
    from airflow_volcano_wandb.wait import job_watcher  # noqa: F401  (its watches too,
    from bench.polling_trigger import PollingVolcanoJobTrigger  # noqa: F401  the RSS baseline)

    jobs = load_jobs(options.jobs_file, options.jobs)
    names = [job["name"] for job in jobs]
    if options.wait_go:  # everything is imported: say so, and start when told
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    dump_on_sigusr1()
    runner = TriggerRunner()
    runner.job_id = 1
    runner.events = StampedEvents()
    cancelled = keep_cancelled(runner)
    watchdog = asyncio.create_task(runner.block_watchdog())
    started = time.time()
    cpu_start = proc.cpu_times()
    for i, job in enumerate(jobs, start=1):
        classpath, kwargs = make_trigger(
            options.mode, job, options.namespace, options.interval, options.follow_master_log
        ).serialize()
        runner.to_create.append(
            RunTrigger(id=i, classpath=classpath, encrypted_kwargs=Trigger.encrypt_kwargs(kwargs))
        )
    await runner.create_triggers()
    synced_after: list[float] = []
    sync_task = asyncio.create_task(first_sync(started, synced_after))
    if options.mode == "poll":
        sync_task.cancel()  # polling keeps no shared watch
    result: dict = {
        "mode": options.mode,
        "interval": options.interval,
        "jobs": len(names),
        "started": started,
        "rss_before_mb": rss_before / 2**20,
        # The triggerer's [volcano_wandb] pod_watch from its environment (None: the default).
        "pod_watch_env": os.environ.get("AIRFLOW__VOLCANO_WANDB__POD_WATCH"),
    }

    async def housekeeping(until: float) -> None:
        # What the runner's main loop does each second, minus the supervisor round trip.
        while time.time() < until:
            await runner.cleanup_finished_triggers()
            await asyncio.sleep(1)

    if options.mode_kind == "scale":
        # The window opens once every shared watch has its first LIST in (so the triggers'
        # looks before it, which read the job or its pods directly, are over), then a settle.
        sync_deadline = time.time() + options.sync_timeout
        while options.mode != "poll" and not synced_after and time.time() < sync_deadline:
            await housekeeping(time.time() + 1)
        await housekeeping(time.time() + options.settle)
        conns, watches = [], []
        cpu0, req0, t0 = proc.cpu_times(), REQUESTS["count"], time.monotonic()
        print("WINDOW_START", flush=True)
        end = time.time() + options.window
        while time.time() < end:
            conns.append(apiserver_connections(options.port))
            watches.append(watch_counts())
            await housekeeping(min(end, time.time() + 2))
        cpu1, req1, t1 = proc.cpu_times(), REQUESTS["count"], time.monotonic()
        print("WINDOW_END", flush=True)
        minutes = (t1 - t0) / 60
        result.update(
            {
                "window_s": t1 - t0,
                "cpu_s_per_min": ((cpu1.user + cpu1.system) - (cpu0.user + cpu0.system)) / minutes,
                "client_requests_per_min": (req1 - req0) / minutes,
                "tcp_connections_max": max(conns),
                "tcp_connections_mean": sum(conns) / len(conns),
                "shared_watchers": max(jobs for jobs, _ in watches),
                "shared_watches_all": max(every for _, every in watches),
                "rss_mb": proc.memory_info().rss / 2**20,
                "fired_early": len(runner.events.stamps),
                "cpu_s_total": (cpu1.user + cpu1.system) - (cpu_start.user + cpu_start.system),
                "log_lines": SHOWN["lines"],
            }
        )
    else:
        deadline = time.time() + options.timeout
        while len(runner.events.stamps) < len(names) and time.time() < deadline:
            await asyncio.sleep(0.5)
            await runner.cleanup_finished_triggers()
        result["events"] = [
            {
                "job": names[tid - 1],
                "t": t,
                "outcome": payload.get("outcome"),
                "phase": payload.get("phase"),
            }
            for t, tid, payload in runner.events.stamps
        ]
        result["rss_mb"] = proc.memory_info().rss / 2**20
        result.update(unfired_triggers(runner, names, cancelled))
    sync_task.cancel()
    result["first_sync_s"] = synced_after[0] if synced_after else None
    # List+watch (re)connections the shared watches made so far, and their backoff schedule,
    # for the parent to bound the attempts it should see.
    from airflow_volcano_wandb.wait import namespace_watch as nw

    result["watch_connects"] = sum(w.connects for w in _watches())
    result["backoff"] = {"initial": nw.RECONNECT_BACKOFF_INITIAL, "max": nw.RECONNECT_BACKOFF_MAX}
    result["api_calls"] = API_CALLS
    runner.stop = True
    for trigger in list(runner.triggers.values()):
        trigger["task"].cancel()
    await asyncio.gather(*(t["task"] for t in runner.triggers.values()), return_exceptions=True)
    await watchdog
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=["scale", "latency"])
    parser.add_argument("--mode", choices=["operator", "watch", "poll"], required=True)
    parser.add_argument("--interval", type=float, default=2.0, help="poll interval")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--jobs-file", required=True, help="JSON list of job names")
    parser.add_argument("--jobs", type=int, default=10**9)
    parser.add_argument("--port", type=int, default=0, help="apiserver port")
    parser.add_argument("--settle", type=float, default=8.0, help="after the first sync")
    parser.add_argument(
        "--sync-timeout", type=float, default=180.0, help="scale: the longest wait for it"
    )
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--follow-master-log",
        action="store_true",
        help="the provider's triggers also follow their master's log",
    )
    parser.add_argument(
        "--wait-go",
        action="store_true",
        help="print READY once imported, start on a line from stdin",
    )
    options = parser.parse_args()
    options.mode_kind = options.kind
    os.environ.setdefault("AIRFLOW_DISABLE_GREENBACK_PORTAL", "false")
    _count_requests()
    _count_hook_calls()
    _count_shown_lines()
    result = asyncio.run(drive(options))
    Path(options.out).write_text(json.dumps(result))


if __name__ == "__main__":
    main()

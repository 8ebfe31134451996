"""Drive N triggers in one event loop with Airflow's own ``TriggerRunner`` code, and measure.

The triggers go the way a triggerer takes them (serialized, kwargs encrypted, created and run
by the runner beside its block watchdog; no DB sync). ``--mode``: ``operator`` (the operator's
defaults), ``watch`` (the bare trigger: no pod reads) or ``poll`` (the baseline). ``scale``:
after the first sync and a settle, one window (CPU, RSS, connections, requests; marked by
``WINDOW_START``/``WINDOW_END`` lines for the parent's scrapes); ``latency``: until every
trigger fired. ``api_calls``: every hook call, counted before it goes out.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import time
from collections import deque
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from airflow.triggers.base import BaseTrigger, TriggerEvent  # noqa: E402
from unfired import keep_cancelled, unfired_triggers  # noqa: E402

COUNTS = {"requests": 0, "lines": 0, "wandb_reads": 0, "wandb_clients": 0}
# Every call of the hook's list/watch/read/delete, as (wall time, verb): counted before the
# call goes out, so attempts that never reach the apiserver (it is down) count too.
API_CALLS: list[tuple[float, str]] = []


class PollingVolcanoJobTrigger(BaseTrigger):
    """The polling baseline, as cncf.kubernetes triggers (2 s) and W&B Launch's agent (10 s)
    wait: the provider's hook and event, one GET per job per interval."""

    def __init__(self, job_name: str, namespace: str, interval: float = 2.0) -> None:
        super().__init__()
        self.job_name, self.namespace, self.interval = job_name, namespace, interval

    def serialize(self) -> tuple[str, dict[str, Any]]:
        kwargs = {"job_name": self.job_name, "namespace": self.namespace}
        return f"{__name__}.PollingVolcanoJobTrigger", {**kwargs, "interval": self.interval}

    async def run(self) -> AsyncIterator[TriggerEvent]:
        from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
        from airflow_volcano_wandb.job.job_status import interpret
        from airflow_volcano_wandb.wait.outcome import WaitResult

        hook = AsyncVolcanoHook(conn_id="kubernetes_default")  # once: its kubeconfig too
        while True:
            job = await hook.get_job(self.job_name, self.namespace)
            status = interpret(job, name=self.job_name, namespace=self.namespace)
            if status.terminal:
                yield TriggerEvent(WaitResult.from_status(status).to_event())
                return
            await asyncio.sleep(self.interval)


def _count_calls() -> None:
    """Count the client's requests, the master log lines the triggers show (each through the
    per-job cap) and every call of the async hook (``API_CALLS``)."""
    from kubernetes_asyncio.client import rest

    from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook as Hook
    from airflow_volcano_wandb.logs.log_lines import LogCap

    request, admit = rest.RESTClientObject.request, LogCap.admit

    async def counted_request(self, *args, **kwargs):
        COUNTS["requests"] += 1
        return await request(self, *args, **kwargs)

    def counted_admit(self, line):
        shown, notice = admit(self, line)
        COUNTS["lines"] += shown
        return shown, notice

    def counted(verb: str, original, stream: bool = False):
        async def call(self, *args, **kwargs):
            API_CALLS.append((time.time(), verb))
            return await original(self, *args, **kwargs)

        def generator(self, *args, **kwargs):  # a watch: the same async generator back
            API_CALLS.append((time.time(), verb))
            return original(self, *args, **kwargs)

        return generator if stream else call

    rest.RESTClientObject.request, LogCap.admit = counted_request, counted_admit
    _count_wandb()
    for verb, name in (
        ("list", "list_jobs_page"),
        ("get", "read_job"),
        ("delete", "delete_job"),
        ("list_pods", "list_job_pods"),  # a job's pods, for the restart and startup budgets
        ("list_pod_page", "list_pods_page"),  # the pod watch's LIST
        ("watch", "watch_jobs"),
        ("watch_pods", "watch_pods"),
    ):
        setattr(Hook, name, counted(verb, getattr(Hook, name), stream=verb.startswith("watch")))


def _count_wandb() -> None:
    """Count the W&B clients made (each checks its key) and the run summaries read."""
    from airflow_volcano_wandb.hooks.wandb import WandbHook

    get_conn, summary = WandbHook.get_conn, WandbHook.get_run_summary

    def counted_conn(self):
        COUNTS["wandb_clients"] += 1
        return get_conn(self)

    def counted_summary(self, *args, **kwargs):
        COUNTS["wandb_reads"] += 1
        return summary(self, *args, **kwargs)

    WandbHook.get_conn, WandbHook.get_run_summary = counted_conn, counted_summary


class StampedEvents(deque):
    """The runner's outbound event queue, stamping each event as it is queued."""

    def __init__(self) -> None:
        super().__init__()
        self.stamps: list[tuple[float, int, dict]] = []

    def append(self, entry) -> None:
        self.stamps.append((time.time(), entry.trigger_id, entry.event.payload))
        super().append(entry)


def apiserver_connections(port: int) -> int:
    return sum(
        1
        for c in psutil.Process().net_connections(kind="tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


def operator_default_kwargs(job: dict, follow: bool) -> dict:
    """What the operator's deferred trigger carries (``Waiter.trigger``) when a DAG sets none of
    the wait's options, from the parts' own defaults: the submission's uid, try 1, now."""
    from airflow_volcano_wandb.operators.operator_parts import SubmitOptions
    from airflow_volcano_wandb.parts.connection import Connection
    from airflow_volcano_wandb.parts.job_wait import JobWait
    from airflow_volcano_wandb.parts.limits import RunLimits
    from airflow_volcano_wandb.parts.log_follow import LogFollow

    wait, now = JobWait(), time.time()
    kwargs = {"job_uid": job.get("uid"), **Connection().kwargs(), "try_number": 1}
    kwargs |= {"pending_timeout": wait.pending_timeout, "deadline": None}  # no execution_timeout
    kwargs |= {"poll_interval": SubmitOptions().poll_interval}
    kwargs |= {"watch_failure_grace": wait.watch_failure_grace, **RunLimits().trigger_kwargs()}
    kwargs |= LogFollow().trigger_kwargs((), follow=follow)
    return {**kwargs, "deferred_at": now, "waiting_since": now}


def make_trigger(
    mode: str, job: dict, namespace: str, interval: float, follow: bool = False, wandb: str = ""
):
    """``operator``: as the operator defers it by default; ``watch``: the bare trigger (no pod
    reads, no settle), on this submission where its uid is known, asking the W&B run of the
    job's name through connection ``wandb`` (its entity and project) when given; ``poll``: the
    baseline."""
    from airflow_volcano_wandb.triggers import VolcanoJobTrigger

    name = job["name"]
    if mode == "operator":
        kwargs = operator_default_kwargs(job, follow)
    elif mode == "watch":
        own = {"job_uid": job["uid"], "try_number": 1} if job.get("uid") else {}
        kwargs = {**own, "follow_master_log": follow, **wandb_kwargs(wandb, name)}
    else:
        return PollingVolcanoJobTrigger(name, namespace, interval)
    return VolcanoJobTrigger(job_name=name, namespace=namespace, **kwargs)


def wandb_kwargs(conn_id: str, run_id: str) -> dict:
    """What the operator hands its trigger for an online run (``progress_kwargs``)."""
    if not conn_id:
        return {}
    from airflow_volcano_wandb.hooks.wandb import WandbHook

    hook = WandbHook(conn_id)
    where = {"wandb_entity": hook.entity, "wandb_project": hook.project}
    return {"wandb_conn_id": conn_id, "wandb_run_id": run_id, **where}


def helpers(proc: psutil.Process) -> dict[int, tuple[float, float]]:
    """The CPU seconds and RSS (MB) of each process this one started (the SDK's wandb-core)."""
    out = {}
    for kid in proc.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            out[kid.pid] = (cpu_s(kid.cpu_times()), kid.memory_info().rss / 2**20)
    return out


def _watches() -> list:
    """The event loop's shared watches, job and pod watches alike."""
    from airflow_volcano_wandb.wait import namespace_watch

    return list(namespace_watch._watches.values())


async def first_sync(started: float, printed: list[bool]) -> None:
    """When every shared watch (jobs' and pods') first has its complete LIST in: SYNCED."""
    while not (watchers := _watches()) or not all(w.synced.is_set() for w in watchers):
        await asyncio.sleep(0.01)
    printed.append(time.time() - started)
    print("SYNCED", flush=True)


def watch_counts() -> tuple[int, int]:
    """The shared job watches and all shared watches this process holds now."""
    from airflow_volcano_wandb.wait.job_watcher import NamespaceJobWatcher

    watches = _watches()
    return sum(isinstance(w, NamespaceJobWatcher) for w in watches), len(watches)


def cpu_s(times) -> float:
    return times.user + times.system


async def measure_window(options, runner, housekeeping, synced_after: list[float]) -> dict:
    """``scale``: once every shared watch has its first LIST in (the triggers' looks before
    it, which read the job or its pods directly, are over) and a settle, one window."""
    proc = psutil.Process()
    sync_deadline = time.time() + options.sync_timeout
    while options.mode != "poll" and not synced_after and time.time() < sync_deadline:
        await housekeeping(time.time() + 1)
    await housekeeping(time.time() + options.settle)
    conns, watches, kids0, reads0 = [], [], helpers(proc), COUNTS["wandb_reads"]
    cpu0, req0, t0 = proc.cpu_times(), COUNTS["requests"], time.monotonic()
    print("WINDOW_START", flush=True)
    end = time.time() + options.window
    while time.time() < end:
        conns.append(apiserver_connections(options.port))
        watches.append(watch_counts())
        await housekeeping(min(end, time.time() + 2))
    cpu1, req1, t1 = proc.cpu_times(), COUNTS["requests"], time.monotonic()
    kids1 = helpers(proc)
    print("WINDOW_END", flush=True)
    minutes = (t1 - t0) / 60
    kids_cpu = sum(cpu - kids0.get(pid, (0.0, 0.0))[0] for pid, (cpu, _) in kids1.items())
    figures = {"helper_cpu_s_per_min": kids_cpu / minutes, "helpers": len(kids1)}
    figures |= {"helper_rss_mb": sum(rss for _, rss in kids1.values())}
    figures |= {"wandb_reads_per_min": (COUNTS["wandb_reads"] - reads0) / minutes}
    figures |= {"wandb_clients": COUNTS["wandb_clients"]}
    figures |= {"window_s": t1 - t0, "cpu_s_per_min": (cpu_s(cpu1) - cpu_s(cpu0)) / minutes}
    figures |= {"client_requests_per_min": (req1 - req0) / minutes}
    figures |= {"tcp_connections_max": max(conns), "tcp_connections_mean": sum(conns) / len(conns)}
    jobs, every = zip(*watches, strict=True)  # shared job watches, all shared watches
    figures |= {"shared_watchers": max(jobs), "shared_watches_all": max(every)}
    figures |= {"rss_mb": proc.memory_info().rss / 2**20, "fired_early": len(runner.events.stamps)}
    return {**figures, "log_lines": COUNTS["lines"]}


async def drive(options: argparse.Namespace) -> dict:
    from airflow.executors.workloads.trigger import RunTrigger
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.models.trigger import Trigger

    from airflow_volcano_wandb.triggers import VolcanoJobTrigger  # noqa: F401  (imported before
    from airflow_volcano_wandb.wait import job_watcher  # noqa: F401  the RSS baseline)
    from airflow_volcano_wandb.wait import namespace_watch as nw

    if options.wait_go:  # everything is imported: say so, and start when told
        print("READY", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    # Read when told to start: a scenario may create the jobs (and learn their uids) meanwhile.
    entries = json.loads(Path(options.jobs_file).read_text())[: options.jobs]
    # Names, or {"name", "uid"} as the operator knows them after submitting.
    jobs = [e if isinstance(e, dict) else {"name": e} for e in entries]
    names = [job["name"] for job in jobs]
    proc = psutil.Process()
    rss_before = proc.memory_info().rss
    runner = TriggerRunner()
    runner.job_id, runner.events = 1, StampedEvents()
    cancelled = keep_cancelled(runner)
    watchdog = asyncio.create_task(runner.block_watchdog())
    started, cpu_start = time.time(), proc.cpu_times()
    for i, job in enumerate(jobs, start=1):
        trigger = make_trigger(
            options.mode,
            job,
            options.namespace,
            options.interval,
            options.follow_master_log,
            options.wandb_conn,
        )
        classpath, kwargs = trigger.serialize()
        encrypted = Trigger.encrypt_kwargs(kwargs)
        runner.to_create.append(RunTrigger(id=i, classpath=classpath, encrypted_kwargs=encrypted))
    await runner.create_triggers()
    synced_after: list[float] = []
    sync_task = asyncio.create_task(first_sync(started, synced_after))
    if options.mode == "poll":
        sync_task.cancel()  # polling keeps no shared watch
    result = {"mode": options.mode, "interval": options.interval, "jobs": len(names)}
    result |= {"started": started, "rss_before_mb": rss_before / 2**20}
    # The triggerer's [volcano_wandb] pod_watch from its environment (None: the default).
    result["pod_watch_env"] = os.environ.get("AIRFLOW__VOLCANO_WANDB__POD_WATCH")

    async def housekeeping(until: float) -> None:
        # What the runner's main loop does each second, minus the supervisor round trip.
        while time.time() < until:
            await runner.cleanup_finished_triggers()
            await asyncio.sleep(1)

    if options.kind == "scale":
        result.update(await measure_window(options, runner, housekeeping, synced_after))
        result["cpu_s_total"] = cpu_s(proc.cpu_times()) - cpu_s(cpu_start)
    else:
        deadline = time.time() + options.timeout
        while len(runner.events.stamps) < len(names) and time.time() < deadline:
            await asyncio.sleep(0.5)
            await runner.cleanup_finished_triggers()
        result["events"] = [
            {"job": names[tid - 1], "t": t, "outcome": p.get("outcome"), "phase": p.get("phase")}
            for t, tid, p in runner.events.stamps
        ]
        result["rss_mb"] = proc.memory_info().rss / 2**20
        result.update(unfired_triggers(runner, names, cancelled))
    sync_task.cancel()
    result["first_sync_s"] = synced_after[0] if synced_after else None
    # List+watch (re)connections the shared watches made so far, and their backoff schedule,
    # for the parent to bound the attempts it should see.
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
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--jobs-file", required=True, help="JSON list of job names")
    parser.add_argument("--out", required=True)
    for flag, default, about in (
        ("--interval", 2.0, "poll interval"),
        ("--jobs", 10**9, "the first N jobs of the file"),
        ("--port", 0, "apiserver port"),
        ("--settle", 8.0, "after the first sync"),
        ("--sync-timeout", 180.0, "scale: the longest wait for it"),
        ("--window", 30.0, "scale: the window (s)"),
        ("--timeout", 120.0, "latency: the longest wait for the events"),
    ):
        parser.add_argument(flag, type=type(default), default=default, help=about)
    parser.add_argument("--follow-master-log", action="store_true", help="triggers follow it")
    parser.add_argument("--wandb-conn", default="", help="watch: ask W&B through this conn id")
    parser.add_argument("--wandb-client-per-read", action="store_true", help="as before 43")
    parser.add_argument("--wait-go", action="store_true", help="READY, then a line on stdin")
    options = parser.parse_args()
    os.environ.setdefault("AIRFLOW_DISABLE_GREENBACK_PORTAL", "false")
    _count_calls()
    if options.wandb_client_per_read:  # before issue 43: a hook, so a wandb.Api, per read
        from airflow_volcano_wandb.hooks.wandb import WandbHook

        WandbHook.shared = classmethod(lambda cls, conn_id, **bounds: cls(conn_id, **bounds))
    Path(options.out).write_text(json.dumps(asyncio.run(drive(options))))


if __name__ == "__main__":
    main()

"""Where a triggerer's memory goes (issue 35): ``trigger_driver.py scale`` with snapshots.

Runs the driver in this process (the same triggers, runner and window) and records, at four
moments (``before`` the triggers are created, when every shared watch has ``synced``, at
``window_start`` and at the window's end, ``steady``): RSS; glibc's heap (``mallinfo2``: in
use and free inside it, which only ``malloc_trim`` gives back); pymalloc's arenas and live
blocks (``sys._debugmallocstats``); the watches' caches (objects, and the sum of
``sys.getsizeof`` over them, shared strings once); open TCP connections and each aiohttp
connector's idle and busy ones; asyncio tasks. ``--trace`` adds ``tracemalloc`` (Python's
allocations by file and line, and their growth from ``before`` to ``steady``): it makes the
process several times slower and larger, so its RSS is no figure, and hides pymalloc's
statistics (its hooks replace pymalloc's). ``--trim`` calls
``malloc_trim(0)`` after each snapshot and records the RSS after it.

Over jobs made beforehand (a JSON list as ``trigger_driver.py`` takes), in the environment
``run_all.py`` gives a driver (``common.airflow_env``); prints nothing but the driver's lines:

    python bench/triggerer_memory.py --namespace NS --jobs-file jobs.json --port PORT \\
        --out memory.json [--jobs 1000] [--window 30] [--trace] [--trim]
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import gc
import json
import os
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import psutil
import trigger_driver

MB = 2**20
SITE = "site-packages/"


class MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            *("arena", "ordblks", "smblks", "hblks", "hblkhd"),
            *("usmblks", "fsmblks", "uordblks", "fordblks", "keepcost"),
        )
    ]


LIBC = ctypes.CDLL("libc.so.6")
LIBC.mallinfo2.restype = MallInfo2
PYMALLOC_KEYS = ("arenas allocated current", "bytes in allocated blocks", "bytes in available")


def pymalloc() -> dict[str, int]:
    """pymalloc's arenas and blocks, from ``sys._debugmallocstats`` (written to fd 2)."""
    read, write = os.pipe()
    saved = os.dup(2)
    os.dup2(write, 2)
    try:
        sys._debugmallocstats()
    finally:
        os.dup2(saved, 2)
        os.close(write)
        os.close(saved)
    with os.fdopen(read, "rb") as stats:
        lines = stats.read().decode().splitlines()
    return {
        key: int(line.split("=")[-1].replace(",", ""))
        for line in lines
        for key in PYMALLOC_KEYS
        if line.lstrip("# ").startswith(key)
    }


def deep_size(obj: Any, seen: set[int]) -> int:
    """``sys.getsizeof`` summed over dicts, lists and what they hold, each object once."""
    stack, total = [obj], 0
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return total


def connectors() -> list[dict[str, int]]:
    import aiohttp

    return [
        {"limit": c.limit, "idle": sum(map(len, c._conns.values())), "busy": len(c._acquired)}
        for c in gc.get_objects()
        if isinstance(c, aiohttp.TCPConnector) and not c.closed
    ]


def snapshot(options: argparse.Namespace, out: dict, snaps: dict, name: str) -> None:
    from airflow_volcano_wandb.wait import namespace_watch

    gc.collect()
    proc, heap = psutil.Process(), LIBC.mallinfo2()
    record: dict[str, Any] = {
        "rss_mb": proc.memory_info().rss / MB,
        "heap_mb": heap.arena / MB,
        "heap_in_use_mb": heap.uordblks / MB,
        "heap_free_mb": heap.fordblks / MB,
        "mmapped_mb": heap.hblkhd / MB,
        "pymalloc": pymalloc(),
        "tcp": sum(1 for c in proc.net_connections("tcp") if c.status == psutil.CONN_ESTABLISHED),
        "connectors": connectors(),
        "tasks": len(asyncio.all_tasks()),
        "types": Counter(type(o).__name__ for o in gc.get_objects()).most_common(15),
    }
    seen: set[int] = set()
    record["caches"] = {
        type(w).__name__: {
            "objects": sum(map(len, w._objects.values())),
            "mb": deep_size(w._objects, seen) / MB,
        }
        for w in namespace_watch._watches.values()
    }
    del seen
    if options.trace:
        snaps[name] = tracemalloc.take_snapshot()
        record["traced_mb"] = tracemalloc.get_traced_memory()[0] / MB
    if options.trim:
        LIBC.malloc_trim(0)
        record["rss_after_trim_mb"] = proc.memory_info().rss / MB
    out[name] = record
    print(f"MEMORY {name} RSS {record['rss_mb']:.1f} MB", file=sys.stderr, flush=True)


def _growth(snaps: dict, key: str) -> list[tuple[str, float, int]]:
    diff = snaps["steady"].compare_to(snaps["before"], key)
    return [
        (str(d.traceback[0]).split(SITE)[-1], d.size_diff / MB, d.count_diff) for d in diff[:30]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for flag in ("--namespace", "--jobs-file", "--port", "--out"):
        parser.add_argument(flag, required=True)
    parser.add_argument("--jobs", default="1000")
    parser.add_argument("--window", default="30")
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--trim", action="store_true")
    options = parser.parse_args()
    if options.trace:
        tracemalloc.start()
    out: dict[str, Any] = {
        "argv": sys.argv[1:],
        "malloc_arena_max": os.environ.get("MALLOC_ARENA_MAX"),
    }
    snaps: dict[str, tracemalloc.Snapshot] = {}
    from airflow.jobs.triggerer_job_runner import TriggerRunner

    create_triggers = TriggerRunner.create_triggers

    async def created(runner: TriggerRunner) -> None:
        snapshot(options, out, snaps, "before")
        await create_triggers(runner)

    TriggerRunner.create_triggers = created  # type: ignore[method-assign]
    moments = {"SYNCED": "synced", "WINDOW_START": "window_start", "WINDOW_END": "steady"}

    def said(*args: Any, **kwargs: Any) -> None:
        if args and args[0] in moments:
            snapshot(options, out, snaps, moments[args[0]])
        print(*args, **kwargs)

    trigger_driver.print = said  # the driver's own lines mark the moments
    driver_out = Path(options.out).with_suffix(".driver.json")
    sys.argv = [
        *("trigger_driver.py", "scale", "--mode", "operator", "--settle", "10"),
        *("--namespace", options.namespace, "--jobs-file", options.jobs_file),
        *("--jobs", options.jobs, "--port", options.port, "--window", options.window),
        *("--out", str(driver_out)),
    ]
    started = time.time()
    trigger_driver.main()
    driver = json.loads(driver_out.read_text())
    out["driver"] = {k: v for k, v in driver.items() if k != "api_calls"}
    out["started"] = started
    if options.trace:
        out["growth_by_file"] = _growth(snaps, "filename")
        out["growth_by_line"] = _growth(snaps, "lineno")
    Path(options.out).write_text(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()

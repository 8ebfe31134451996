"""One wait in a fresh interpreter, as a triggerer's trigger runner holds it: which modules are
imported on the event loop's thread meanwhile.

``python -m test_support.loop_imports JOB NAMESPACE UID`` imports the trigger's module (as
Airflow deserialises a trigger: on the loop's thread), then records every module imported on
that thread while ``VolcanoJobTrigger.run`` waits for the job (its master log followed) to
its first event. It prints one JSON line: the event's outcome, the modules, and the longest
gap a 10 ms heartbeat on the same loop saw (for the reader: a machine's load moves it).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from typing import Any

from airflow_volcano_wandb.triggers.volcano import VolcanoJobTrigger


async def _wait(trigger: VolcanoJobTrigger, gaps: list[float]) -> dict[str, Any]:
    async def heartbeat() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    beating = asyncio.create_task(heartbeat())
    try:
        async for event in trigger.run():
            return dict(event.payload)
        raise AssertionError("the trigger ended without an event")
    finally:
        beating.cancel()


def main(job_name: str, namespace: str, job_uid: str) -> None:
    on_loop: set[str] = set()
    loop_thread = threading.current_thread()

    def audit(event: str, args: tuple[Any, ...]) -> None:
        if event == "import" and threading.current_thread() is loop_thread:
            on_loop.add(args[0])

    sys.addaudithook(audit)
    trigger = VolcanoJobTrigger(
        job_name=job_name,
        namespace=namespace,
        job_uid=job_uid,
        poll_interval=1,
        follow_master_log=True,
    )
    gaps: list[float] = []
    payload = asyncio.run(_wait(trigger, gaps))
    seen = {"outcome": payload["outcome"], "on_loop": sorted(on_loop), "max_gap": max(gaps)}
    print(json.dumps(seen))


if __name__ == "__main__":
    main(*sys.argv[1:4])

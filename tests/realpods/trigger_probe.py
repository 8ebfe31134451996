"""Run inside a pod of the Airflow image: the provider's ``VolcanoJobTrigger`` as a triggerer
runs it, with ``kubernetes_default`` set to ``in_cluster: true`` (the pod's ServiceAccount
token), on the job named in ``$PROBE_JOB`` (``$PROBE_UID``) of ``$PROBE_NAMESPACE``.

It prints one JSON line per fact, prefixed ``PROBE ``: each token the kubelet writes into the
pod (its ``jti``, ``iat`` and ``exp``, read every 5 s), each failure the shared watches report,
and the trigger's event at the end (``{"event": ...}``). The test reads them from the pod's log.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import time

TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


FACTS: list[dict] = []


def say(**fact: object) -> None:
    FACTS.append({"t": round(time.time(), 1), **fact})
    print("PROBE " + json.dumps(FACTS[-1]), flush=True)


def summary() -> str:
    """What the test reads back: the pod's termination message (at most 4096 bytes, kept in
    the pod's status, so it needs no log read): the event, every token, the failures."""
    kept = [f for f in FACTS if "event" in f or "iat" in f]
    kept += [{"failure": f["failure"][:200]} for f in FACTS if "failure" in f][:5]
    return json.dumps(kept)


def claims() -> dict:
    with open(TOKEN) as token:
        payload = token.read().split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


async def watch_tokens_and_failures() -> None:
    from airflow_volcano_wandb.wait import namespace_watch

    seen_token, seen_failures, connects = None, set(), {}
    while True:
        token = claims()
        if token.get("jti") != seen_token:
            seen_token = token.get("jti")
            say(token=seen_token, iat=token["iat"], exp=token["exp"])
        for key, watch in list(namespace_watch._watches.items()):
            kind = type(watch).__name__
            if watch.last_failure and watch.last_failure not in seen_failures:
                seen_failures.add(watch.last_failure)
                say(failure=watch.last_failure, watch=kind)
            if connects.get(key) != watch.connects:
                connects[key] = watch.connects
                say(connects=watch.connects, watch=kind, token=seen_token)
        await asyncio.sleep(5)


async def main() -> None:
    from airflow_volcano_wandb.triggers import VolcanoJobTrigger

    trigger = VolcanoJobTrigger(
        job_name=os.environ["PROBE_JOB"],
        namespace=os.environ["PROBE_NAMESPACE"],
        job_uid=os.environ["PROBE_UID"],
        poll_interval=30,
    )
    side = asyncio.create_task(watch_tokens_and_failures())
    say(started=os.environ["PROBE_JOB"])
    async for event in trigger.run():
        say(event=event.payload)
        break
    side.cancel()
    with open("/dev/termination-log", "w") as out:
        out.write(summary())


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)

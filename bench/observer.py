"""An independent clock for job phase changes: its own process, its own watch.

Volcano's ``status.state.lastTransitionTime`` has second resolution, so it cannot time a
sub-second detection. This process watches the namespace's Volcano jobs (kubernetes client,
sync, nothing shared with the provider) and writes one JSON line per phase change as it sees
it: ``{"job", "phase", "t", "ltt"}`` (``t`` wall clock; ``ltt`` the status's time). Runs until
terminated. Started by ``bench/waiters.py``'s ``Observer``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from kubernetes import client, config, watch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--out", required=True)
    options = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    api = client.CustomObjectsApi(config.new_client_from_config(config_file=options.kubeconfig))
    args = ("batch.volcano.sh", "v1alpha1", options.namespace, "jobs")
    phases: dict[str, str] = {}
    with open(options.out, "a", buffering=1) as out:
        listed = api.list_namespaced_custom_object(*args)
        version = listed["metadata"]["resourceVersion"]
        for job in listed["items"]:
            phases[job["metadata"]["name"]] = (
                (job.get("status") or {}).get("state", {}).get("phase", "")
            )
        out.write(json.dumps({"ready": time.time()}) + "\n")
        while True:
            stream = watch.Watch().stream(
                api.list_namespaced_custom_object,
                *args,
                resource_version=version,
                timeout_seconds=600,
                allow_watch_bookmarks=True,
            )
            for event in stream:
                now = time.time()
                obj = event["object"]
                version = obj["metadata"].get("resourceVersion", version)
                if event["type"] in ("BOOKMARK", "ERROR"):
                    continue
                name = obj["metadata"]["name"]
                state = (obj.get("status") or {}).get("state", {})
                phase = "Deleted" if event["type"] == "DELETED" else state.get("phase", "")
                if phases.get(name) != phase:
                    phases[name] = phase
                    out.write(
                        json.dumps(
                            {
                                "job": name,
                                "phase": phase,
                                "t": now,
                                "ltt": state.get("lastTransitionTime"),
                            }
                        )
                        + "\n"
                    )


if __name__ == "__main__":
    main()

"""13. What the shared pod watch keeps in memory per pod (issue 35; Python only, no cluster):
pods shaped like the local cluster's, held as sent, without ``managedFields`` and as the pod
watch keeps them (``tracemalloc``), and each pod's watch event parsed as ``V1Pod`` or kept.
"""

from __future__ import annotations

import asyncio
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

from common import table

from airflow_volcano_wandb.wait.pod_watcher import kept_pod

KEYS = ("pod_cache",)
OPTIONS = {"pod_cache_pods": (3000, 300, "pods held (1,000 jobs of 3)")}
STAMP = "2026-12-03T23:06:53Z"


def running_pod(i: int) -> dict[str, Any]:
    """The ``i``-th pod of ``i // 3``'s job, running, as the local cluster shows one."""
    job, task, index = f"retrain-{i // 3}", "master" if i % 3 == 0 else "worker", i % 3
    p, uid = "airflow-volcano-wandb.io", "922bf2f2-7955-4c61-9a0d-db423d5363ef"
    run_id = f"scheduled__2026-12-03T23-06-41.930212-00-00-{i:08x}"
    labels = {f"{p}/dag-id": "volcano_pytorch_retrain", f"{p}/map-index": "none"}
    labels |= {f"{p}/run-id": run_id, f"{p}/task-id": "train"}
    labels |= {f"{p}/task-instance": f"{i:040x}", f"{p}/try-number": "1"}
    labels |= {"app.kubernetes.io/managed-by": "airflow-volcano-wandb", "volcano.sh/job-name": job}
    labels |= {"volcano.sh/job-namespace": "team", "volcano.sh/queue-name": "default"}
    labels |= {"volcano.sh/task-index": str(index), "volcano.sh/task-spec": task}
    annotations = {k: v for k, v in labels.items() if k.startswith("volcano.sh/")}
    annotations |= {"scheduling.k8s.io/group-name": f"{job}-{uid}"}
    annotations |= {"volcano.sh/job-retry-count": "0", "volcano.sh/job-version": "0"}
    annotations["volcano.sh/template-uid"] = f"{job}-{task}"
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": job, "uid": uid}
    fields = [
        {"manager": m, "operation": "Update", "time": STAMP, "fieldsV1": {"f:status": {}}}
        for m in ("vc-controller-manager", "vc-scheduler", "kwok")
    ]
    metadata = {"name": f"{job}-{task}-{index}", "namespace": "team"}
    metadata["uid"] = f"{i:08x}-265c-41c0-9551-4b5d0b8e1758"
    metadata |= {"resourceVersion": str(10_000 + i), "generation": 1, "creationTimestamp": STAMP}
    metadata |= {"labels": labels, "annotations": annotations}
    metadata["ownerReferences"] = [{**owner, "controller": True, "blockOwnerDeletion": True}]
    metadata["managedFields"] = fields
    image = "ghcr.io/example/volcano-ddp-mlp:0.1.0"
    env = [{"name": f"AVW_VAR_{n}", "value": "x" * 40} for n in range(15)]
    container = {"name": task, "image": image, "env": env}
    container |= {"resources": {"limits": {"nvidia.com/gpu": "1"}}}
    container["volumeMounts"] = [{"name": f"v{n}", "mountPath": f"/v{n}"} for n in range(3)]
    volumes = [{"name": f"v{n}", "emptyDir": {}} for n in range(3)]
    spec = {"containers": [container], "volumes": volumes}
    spec |= {"nodeName": "kwok-gpu-node-1", "schedulerName": "volcano"}
    status = {"phase": "Running", "qosClass": "BestEffort", "hostIP": "10.0.0.1"}
    status |= {"podIP": "10.0.0.2", "startTime": STAMP}
    status["conditions"] = [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": STAMP}
        for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
    ]
    ids = {"imageID": "sha256:" + "a" * 64, "containerID": "containerd://" + "b" * 64}
    running = {"ready": True, "started": True, "restartCount": 0}
    running["state"] = {"running": {"startedAt": STAMP}}
    status["containerStatuses"] = [
        {"name": task, "image": image, **ids, **running, "lastState": {}}
    ]
    return {"metadata": metadata, "spec": spec, "status": status}


def held(raw: list[str], keep: Callable[[dict], dict]) -> float:
    """Bytes Python holds for ``keep`` of every pod, each parsed from its own JSON."""
    gc.collect()
    tracemalloc.start()
    cache = [keep(json.loads(text)) for text in raw]
    held_bytes = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del cache
    return held_bytes


def event_parse_ms(raw: list[str], passes: int = 5) -> dict[str, float]:
    """Milliseconds per pod event as kubernetes_asyncio's ``Watch`` unmarshals it, into the
    ``V1Pod`` it builds by default and as sent (the provider's watch)."""

    async def timed() -> dict[str, float]:
        from kubernetes_asyncio import watch

        watcher = watch.Watch()  # its ApiClient wants a running loop
        lines = [json.dumps({"type": "MODIFIED", "object": json.loads(p)}) for p in raw]
        figures = {}
        for name, return_type in (("as_v1pod", "V1Pod"), ("as_sent", None)):
            runs = []
            for _ in range(passes):
                start = time.perf_counter()
                for line in lines:
                    watcher.unmarshal_event(line, return_type)
                runs.append((time.perf_counter() - start) * 1000 / len(lines))
            figures[name] = statistics.median(runs)
        await watcher.close()
        return figures

    return asyncio.run(timed())


def run(ctx) -> dict:
    return {"pod_cache": measure(ctx.pod_cache_pods)}


def measure(pods: int) -> dict[str, Any]:
    raw = [json.dumps(running_pod(i)) for i in range(pods)]
    figures: dict[str, Any] = {"pods": pods, "json_kib_per_pod": sum(map(len, raw)) / pods / 1024}
    for name, keep in (
        ("as_sent", lambda pod: pod),
        (
            "without_managed_fields",
            lambda pod: (pod["metadata"].pop("managedFields", None), pod)[1],
        ),
        ("kept", kept_pod),
    ):
        held_bytes = held(raw, keep)
        figures[name] = {"mb": held_bytes / 1e6, "kib_per_pod": held_bytes / pods / 1024}
    figures["kept_over_as_sent"] = figures["kept"]["mb"] / figures["as_sent"]["mb"]
    figures["event_parse_ms"] = event_parse_ms(raw)
    return {k: _rounded(v) for k, v in figures.items()}


def _rounded(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    return round(value, 3) if isinstance(value, float) else value


def section(r: dict) -> list[str]:
    p, parse = r["pod_cache"], r["pod_cache"]["event_parse_ms"]
    rows = [
        ("as the API sends it", p["as_sent"]),
        ("without `managedFields`", p["without_managed_fields"]),
        ("the pod watch's copy (`kept_pod`)", p["kept"]),
    ]
    return [
        f"{p['pods']} running pods shaped like the local cluster's (JSON "
        f"{p['json_kib_per_pod']} KiB each), each parsed from its own JSON, held by Python "
        "(`tracemalloc`, not RSS):",
        "",
        *table("kept | MB | KiB per pod", *((name, f["mb"], f["kib_per_pod"]) for name, f in rows)),
        "",
        f"The pod watch's copy holds {p['kept_over_as_sent']:.2f} of the pod as sent.",
        "",
        "Each pod's watch event on the event loop (median of five passes): "
        f"{parse['as_v1pod']} ms with kubernetes_asyncio's default `V1Pod`, {parse['as_sent']} "
        "ms kept as sent (the provider's watch).",
    ]

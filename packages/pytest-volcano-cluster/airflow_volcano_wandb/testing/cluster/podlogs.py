"""The ``podlogs`` component: gives every simulated container a log of its own.

KWOK serves ``kubectl logs`` from files named in ``Logs`` objects (one per pod, matched by
name). No container runs, so this watcher writes what a PyTorch launcher would print first
(pod, task, rank, world size, master address, planned exit) in the CRI log format when the
pod is scheduled, appends a line whenever a container exits, and creates the pod's
``Logs`` object owned by the pod, so the garbage collector removes it with the pod.

A pod annotated ``PRINT_ENV_ANNOTATION: "NAME,..."`` also prints those environment variables,
``secretKeyRef`` ones resolved from their Secret as the kubelet would: a trainer that dumps its
environment, for tests that the W&B key is masked wherever Airflow shows pod logs. Each value
is printed in the three forms a log may carry a W&B key in: as is, in base64, and as the HTTP
basic credentials the W&B client sends (``Authorization: Basic base64("api:" + value)``, as a
trainer's HTTP debug log prints them), so a masker that misses a form leaves it to be found.

The same watcher holds back a pod whose ``secretKeyRef`` does not resolve, as a kubelet does
(``CreateContainerConfigError``; see ``secret_refs``): no log is written before it starts.

For tests of log following: ``LOG_LINES_ANNOTATION: "N"`` prints N numbered lines at start;
``SPLIT_LINE_ANNOTATION: "text"`` prints a line in two writes a second apart (a CRI partial
entry, then its end), so a follower receives it in two chunks; ``PROGRESS_ANNOTATION: "N"``
prints a trainer's ``AVW_PROGRESS`` record a second, its step reaching N as its run ends (the
progress contract without W&B, docs/trainer.md); and a restarted container
prints its start lines again, in the same file (the follower sees a replay plus new lines).
What the container printed between its last two starts (its exit line included) is also
copied to a file of its own, served as the ``previous=true`` log, as the kubelet serves the
log of the container instance before the running one.
"""

from __future__ import annotations

import base64
import datetime
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

from airflow_volcano_wandb.testing.cluster.kube import Kube, KubeError
from airflow_volcano_wandb.testing.cluster.secret_refs import SecretRefGate

DURATION_ANNOTATION = "sim.airflow-volcano-wandb.io/duration"
EXIT_CODE_ANNOTATION = "sim.airflow-volcano-wandb.io/exit-code"
PRINT_ENV_ANNOTATION = "sim.airflow-volcano-wandb.io/print-env"
LOG_LINES_ANNOTATION = "sim.airflow-volcano-wandb.io/log-lines"
SPLIT_LINE_ANNOTATION = "sim.airflow-volcano-wandb.io/split-line"
PROGRESS_ANNOTATION = "sim.airflow-volcano-wandb.io/progress-steps"
SPLIT_LINE_DELAY = 1.0
LOGS_API = "/apis/kwok.x-k8s.io/v1alpha1"


def _cri_line(text: str, stream: str = "stdout", tag: str = "F") -> str:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return f"{stamp} {stream} {tag} {text}\n"


def _append(path: Path, text: str) -> None:
    if path.parent.exists():  # the pod may be gone meanwhile
        with path.open("a") as f:
            f.write(text)


def _report_progress(path: Path, total_steps: int, seconds: float) -> None:
    started = time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds and path.parent.exists():
        record = {"step": int(total_steps * elapsed / seconds), "total_steps": total_steps}
        _append(path, _cri_line(f"AVW_PROGRESS {json.dumps(record)}"))
        time.sleep(1.0)


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in container.get("env") or [] if "name" in e}


def _base64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _secret_value(kube: Kube, namespace: str, ref: dict[str, Any]) -> str:
    secret = kube.get_or_none(f"/api/v1/namespaces/{namespace}/secrets/{ref.get('name')}")
    data = (secret or {}).get("data") or {}
    if ref.get("key") not in data:
        return "<unresolved secretKeyRef>"
    return base64.b64decode(data[ref["key"]]).decode(errors="replace")


class PodLogWriter:
    def __init__(self, kube: Kube, root: Path) -> None:
        self.kube = kube
        self.root = root
        # uid -> (container name -> number of exits already written)
        self._seen: dict[str, dict[str, int]] = {}
        # uid -> (container name -> offset in its log file where the running instance began)
        self._instance_start: dict[str, dict[str, int]] = {}

    def _file(self, pod: dict[str, Any], container: str, previous: bool = False) -> Path:
        meta = pod["metadata"]
        name = f"{container}.previous.log" if previous else f"{container}.log"
        return self.root / meta["namespace"] / meta["name"] / meta["uid"] / name

    def handle(self, kind: str, pod: dict[str, Any], may_start: bool = True) -> None:
        """Write or extend the pod's logs; none before its containers ``may_start``."""
        meta = pod["metadata"]
        uid = meta["uid"]
        if kind == "DELETED":
            self._seen.pop(uid, None)
            self._instance_start.pop(uid, None)
            shutil.rmtree(self.root / meta["namespace"] / meta["name"] / uid, ignore_errors=True)
            return
        if not pod.get("spec", {}).get("nodeName"):
            return
        if uid not in self._seen:
            if not may_start:  # its Secret references do not resolve yet (secret_refs)
                return
            self._start(pod)
        self._record_exits(pod)

    def _start(self, pod: dict[str, Any]) -> None:
        meta, spec = pod["metadata"], pod["spec"]
        labels = meta.get("labels") or {}
        annotations = meta.get("annotations") or {}
        task = labels.get("volcano.sh/task-spec", "-")
        job = labels.get("volcano.sh/job-name", "-")
        duration = annotations.get(DURATION_ANNOTATION, "2")
        code = annotations.get(EXIT_CODE_ANNOTATION, "0")
        logs = []
        for container in spec.get("containers", []):
            env = _env(container)
            path = self._file(pod, container["name"])
            path.parent.mkdir(parents=True, exist_ok=True)
            lines = [
                f"[sim] pod {meta['namespace']}/{meta['name']} container {container['name']} "
                f"started on node {spec['nodeName']} (image {container.get('image', '')})",
                f"[sim] volcano job={job} task={task} RANK={env.get('RANK', '-')} "
                f"WORLD_SIZE={env.get('WORLD_SIZE', '-')} "
                f"MASTER_ADDR={env.get('MASTER_ADDR', '-')} "
                f"MASTER_PORT={env.get('MASTER_PORT', '-')}",
                f"[sim] running for {duration}s, then exiting with code {code}",
            ]
            lines += self._printed_env(meta, container, annotations.get(PRINT_ENV_ANNOTATION))
            count = int(annotations.get(LOG_LINES_ANNOTATION, "0"))
            lines += [f"[sim] line {i} of {count}" for i in range(1, count + 1)]
            path.write_text("".join(_cri_line(line) for line in lines))
            split = annotations.get(SPLIT_LINE_ANNOTATION)
            if split:
                half = len(split) // 2
                _append(path, _cri_line(split[:half], tag="P"))
                timer = threading.Timer(SPLIT_LINE_DELAY, _append, (path, _cri_line(split[half:])))
                timer.daemon = True
                timer.start()
            if steps := annotations.get(PROGRESS_ANNOTATION):
                threading.Thread(
                    target=_report_progress, args=(path, int(steps), float(duration)), daemon=True
                ).start()
            logs.append(
                {
                    "containers": [container["name"]],
                    "logsFile": str(path),
                    "previousLogsFile": str(self._file(pod, container["name"], previous=True)),
                    "follow": True,
                }
            )
        self._seen[meta["uid"]] = {}
        self._instance_start[meta["uid"]] = {}
        body = {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "Logs",
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": meta["name"], "uid": meta["uid"]}
                ],
            },
            "spec": {"logs": logs},
        }
        try:
            self.kube.apply(f"{LOGS_API}/namespaces/{meta['namespace']}/logs", body)
        except KubeError as err:
            # A namespace being deleted refuses new objects; the pod goes with it anyway.
            print(f"podlogs: {meta['namespace']}/{meta['name']}: {err}", file=sys.stderr)

    def _printed_env(
        self, meta: dict[str, Any], container: dict[str, Any], names: str | None
    ) -> list[str]:
        lines = []
        for name in filter(None, (n.strip() for n in (names or "").split(","))):
            for var in container.get("env") or []:
                if var.get("name") != name:
                    continue
                ref = (var.get("valueFrom") or {}).get("secretKeyRef")
                value = (
                    _secret_value(self.kube, meta["namespace"], ref) if ref else var.get("value")
                )
                lines += [
                    f"[sim] env {name}={value}",
                    f"[sim] env {name} in base64: {_base64(value or '')}",
                    f"[sim] http send: Authorization: Basic {_base64(f'api:{value}')}",
                ]
        return lines

    def _record_exits(self, pod: dict[str, Any]) -> None:
        written = self._seen[pod["metadata"]["uid"]]
        for status in pod.get("status", {}).get("containerStatuses") or []:
            name = status["name"]
            exits = status.get("restartCount", 0) + (1 if "terminated" in status["state"] else 0)
            if exits <= written.get(name, 0):
                continue
            term = (
                status["state"].get("terminated")
                or (status.get("lastState") or {}).get("terminated")
                or {}
            )
            text = _cri_line(
                f"[sim] container {name} exited with code "
                f"{term.get('exitCode', '?')} ({term.get('reason', '')})"
            )
            path = self._file(pod, name)
            _append(path, text)
            if "running" in status["state"]:  # restarted: a new process, its start lines
                self._keep_previous(pod, name, path)
                _append(
                    path,
                    _cri_line(
                        f"[sim] container {name} restarted "
                        f"(restart {status.get('restartCount', 0)})"
                    ),
                )
            written[name] = exits

    def _keep_previous(self, pod: dict[str, Any], container: str, path: Path) -> None:
        """Copy what the instance that just exited printed to the container's previous log."""
        starts = self._instance_start.setdefault(pod["metadata"]["uid"], {})
        if not path.exists():
            return
        text = path.read_bytes()
        self._file(pod, container, previous=True).write_bytes(text[starts.get(container, 0) :])
        starts[container] = len(text)


def run(kube: Kube, root: Path) -> None:
    """List then watch all pods forever, re-listing whenever the watch ends; hold back pods
    whose Secret references do not resolve (``secret_refs``)."""
    writer = PodLogWriter(kube, root)
    gate = SecretRefGate(kube)
    threading.Thread(target=gate.recheck_forever, name="secret-refs", daemon=True).start()
    while True:
        try:
            listing = kube.get("/api/v1/pods", timeout=30)
            for pod in listing.get("items", []):
                writer.handle("ADDED", pod, gate.may_start("ADDED", pod))
            version = listing["metadata"]["resourceVersion"]
            for event in kube.watch("/api/v1/pods", version):
                if event.get("type") == "ERROR":
                    break
                kind, pod = event["type"], event["object"]
                writer.handle(kind, pod, gate.may_start(kind, pod))
        except Exception as err:  # the apiserver restarting must not end the component
            print(f"podlogs: watch interrupted: {err!r}", file=sys.stderr, flush=True)
            time.sleep(1)

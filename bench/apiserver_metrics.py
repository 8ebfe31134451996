"""The apiserver's own counts, from its /metrics: requests by verb and resource, open watches.

The apiserver does not say who asked: a scenario scrapes before and after a window and
subtracts the control plane's own rate, measured idle (``waiters.background``).
"""

from __future__ import annotations

import re

GROUP, PLURAL = "batch.volcano.sh", "jobs"

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)\{([^}]*)\}\s+([0-9.eE+-]+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text: str, names: set[str]) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m and m.group(1) in names:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def job_api_counters(text: str) -> dict[str, float]:
    """Requests on Volcano jobs by verb, and the open watches on them, from /metrics."""
    counts: dict[str, float] = {"watches": 0.0}
    for name, labels, value in parse_metrics(
        text, {"apiserver_request_total", "apiserver_longrunning_requests"}
    ):
        if labels.get("group") != GROUP or labels.get("resource") != PLURAL:
            continue
        if name == "apiserver_longrunning_requests":
            if labels.get("verb") == "WATCH":
                counts["watches"] += value
            continue
        verb = labels.get("verb", "?")
        if labels.get("subresource"):
            verb += "/" + labels["subresource"]
        counts[verb] = counts.get(verb, 0.0) + value
    return counts


def request_key(labels: dict[str, str]) -> str:
    """``"LIST pods"``, ``"GET jobs"``, ``"GET pods/log"``: a request's verb and resource (the
    API group only where the resource's name alone is ambiguous or unknown here)."""
    resource = labels.get("resource", "?")
    if labels.get("subresource"):
        resource += "/" + labels["subresource"]
    group = labels.get("group", "")
    if group not in ("", GROUP):
        resource += f" ({group})"
    return f"{labels.get('verb', '?')} {resource}"


def api_counters(text: str) -> dict[str, dict[str, float]]:
    """Every request the apiserver counted so far by verb and resource (``requests``), and
    its open watches by resource (``watches``), from /metrics."""
    requests: dict[str, float] = {}
    watches: dict[str, float] = {}
    for name, labels, value in parse_metrics(
        text, {"apiserver_request_total", "apiserver_longrunning_requests"}
    ):
        if name == "apiserver_longrunning_requests":
            if labels.get("verb") == "WATCH":
                key = request_key(labels).removeprefix("WATCH ")
                watches[key] = watches.get(key, 0.0) + value
            continue
        if not labels.get("resource"):  # /metrics, /readyz...: not the API's objects
            continue
        key = request_key(labels)
        requests[key] = requests.get(key, 0.0) + value
    return {"requests": requests, "watches": watches}


def rates(start: dict[str, float], end: dict[str, float], minutes: float) -> dict[str, float]:
    """Per-minute rates of the counters that moved between two scrapes."""
    return {
        key: (end[key] - start.get(key, 0.0)) / minutes
        for key in end
        if end[key] != start.get(key, 0.0)
    }


#: The resources a waiter reads or writes: the Volcano jobs and their pods (with their logs).
WAITER_RESOURCES = ("jobs", "pods")


def waiter_resource(key: str) -> bool:
    resource = key.split(" ", 1)[1]
    return resource.split("/")[0] in WAITER_RESOURCES and "(" not in resource


READ_VERBS = ("GET", "LIST", "WATCH")


def reads(counters: dict[str, float]) -> float:
    return sum(counters.get(v, 0.0) for v in READ_VERBS)

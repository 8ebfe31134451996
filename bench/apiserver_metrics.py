"""The apiserver's own counts, from its /metrics: requests by verb and resource, open watches.

The apiserver does not say who asked: a scenario scrapes before and after a window and
subtracts the control plane's own rate, measured idle (``background``).
"""

from __future__ import annotations

import re
import time

from common import say

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


def waiter_resource(key: str) -> bool:
    """A resource a waiter reads or writes: the Volcano jobs and their pods (with their logs)."""
    resource = key.split(" ", 1)[1]
    return resource.split("/")[0] in ("jobs", "pods") and "(" not in resource


def reads(counters: dict[str, float]) -> float:
    return sum(counters.get(v, 0.0) for v in ("GET", "LIST", "WATCH"))


def scrape(cluster) -> tuple[float, dict]:
    """The apiserver's counters now: on Volcano jobs (``job_api_counters``) and, under
    ``"all"``, every request by verb and resource and the open watches by resource."""
    text = cluster.metrics()
    return time.monotonic(), {**job_api_counters(text), "all": api_counters(text)}


def background(cluster, tag: str) -> tuple[float, float, dict]:
    """What the control plane itself reads on Volcano jobs (controller, scheduler), per
    minute, and its open job watches: to subtract, as the metrics do not say who asked. The
    third item is the same for every verb and resource (``rates`` per minute, open
    ``watches`` by resource)."""
    time.sleep(5)
    a_t, a = scrape(cluster)
    # A minute: the control plane's own requests are mostly its watches starting again, now
    # and then; over 20 s one such request read as 3 a minute, subtracted from every window.
    time.sleep(60)
    b_t, b = scrape(cluster)
    minutes = (b_t - a_t) / 60
    idle_rate = (reads(b) - reads(a)) / minutes
    by_key = {
        "rates": rates(a["all"]["requests"], b["all"]["requests"], minutes),
        "watches": b["all"]["watches"],
    }
    say(f"{tag}: background {idle_rate:.1f} job reads/min, {b['watches']:.0f} job watches open")
    return idle_rate, b["watches"], by_key


def net_breakdown(start: dict, end: dict, minutes: float, idle: dict) -> dict:
    """A waiter's requests per minute by verb and resource, and its watches by resource: the
    window's less the background's (``idle``, from ``background``).

    Only the resources a waiter touches (Volcano jobs, pods, their subresources) are broken
    down, those that moved by at least 0.5 a minute; the control plane's own requests on
    everything else (mostly its watches timing out and starting again, one request each, at
    random) are summed apart, as ``other_requests_per_min``: what is left of them after the
    background is subtracted is the noise of the method."""
    window = rates(start["requests"], end["requests"], minutes)
    keys = set(window) | set(idle["rates"])
    by_key = {k: window.get(k, 0.0) - idle["rates"].get(k, 0.0) for k in keys}
    ours = {k: v for k, v in by_key.items() if waiter_resource(k)}
    watches = {
        r: max(start["watches"].get(r, 0.0), end["watches"].get(r, 0.0))
        - idle["watches"].get(r, 0.0)
        for r in set(start["watches"]) | set(end["watches"])
        if waiter_resource(f"WATCH {r}")
    }
    return {
        "by_verb_resource": {k: round(v, 1) for k, v in sorted(ours.items()) if abs(v) >= 0.5},
        "watches_by_resource": {r: round(n) for r, n in sorted(watches.items()) if round(n)},
        "waiter_requests_per_min": round(max(0.0, sum(ours.values())), 1),
        "other_requests_per_min": round(sum(v for k, v in by_key.items() if k not in ours), 1),
        "other_largest": largest({k: v for k, v in by_key.items() if k not in ours}),
    }


def largest(rates_by_key: dict[str, float], count: int = 3) -> dict[str, float]:
    """The ``count`` rates farthest from zero: what ``other_requests_per_min`` is made of."""
    top = sorted(rates_by_key.items(), key=lambda item: -abs(item[1]))[:count]
    return {k: round(v, 1) for k, v in top if abs(v) >= 0.5}

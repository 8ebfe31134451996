"""test_support/apiserver_audit.py: who asked what, and the watches each user held open."""

from __future__ import annotations

import json

from test_support.apiserver_audit import ApiUse, read_events

JOBS = "jobs.batch.volcano.sh"


def _line(audit_id, user, verb, stage, received, done, resource="jobs", ns="a") -> str:
    group = {"apiGroup": "batch.volcano.sh"} if resource == "jobs" else {}
    return json.dumps(
        {
            "auditID": audit_id,
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "objectRef": {"resource": resource, "namespace": ns, **group},
            "requestReceivedTimestamp": f"2026-12-01T10:00:{received:02d}.000000Z",
            "stageTimestamp": f"2026-12-01T10:00:{done:02d}.000000Z",
        },
        separators=(",", ":"),
    )


def test_watches_renewed_count_once_and_other_users_are_left_out(tmp_path):
    log = tmp_path / "audit.log"
    log.write_text(
        "\n".join(
            [
                _line("w1", "t-a", "watch", "ResponseStarted", 1, 1),
                _line("w1", "t-a", "watch", "ResponseComplete", 1, 20),  # renewed at 20
                _line("w2", "t-a", "watch", "ResponseStarted", 20, 20),  # still open
                _line("w3", "t-b", "watch", "ResponseStarted", 5, 5),
                _line("w4", "t-b", "watch", "ResponseStarted", 6, 6),  # a second, at once
                _line("l1", "t-a", "list", "ResponseComplete", 30, 30, resource="pods"),
                _line("x1", "admin", "watch", "ResponseStarted", 2, 2),
            ]
        )
        + "\n"
    )
    events = read_events(log, ["t-a", "t-b"])
    assert {e.user for e in events} == {"t-a", "t-b"}
    use = ApiUse(events)
    t0 = events[0].received - 1  # 10:00:00
    assert use.watches(JOBS, t0, t0 + 40) == {("t-a", "a"): 1, ("t-b", "a"): 2}
    assert use.open_watches(JOBS, t0 + 40) == {("t-a", "a"): 1, ("t-b", "a"): 2}
    assert use.open_watches(JOBS, t0 + 3) == {("t-a", "a"): 1}
    assert use.requests(t0 + 25, t0 + 40, ["a"]) == {("t-a", "list", "pods"): 1}
    assert use.requests(t0 + 25, t0 + 40, ["b"]) == {}

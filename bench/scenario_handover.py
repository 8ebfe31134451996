"""The handover scenario's report section and goals (its run: ``handover.py``, which records
through ``results_file`` and so must not be imported by ``report``)."""

from __future__ import annotations


def md_handover(r: dict) -> list[str]:
    h = r["handover"]
    if "error" in h:
        return ["## Handover between triggerers", "", f"The trial did not run: {h['error']}."]

    def fig(key: str) -> str:  # figures carried over from the docs may lack some
        return str(h[key]) if key in h else "not recorded"

    passed = {True: "passed", False: "FAILED"}.get(h.get("trial_passed"), "not recorded")
    ended = (
        f"{h['ended_while_frozen']} of its jobs ended meanwhile, the rest right after the thaw."
        if "ended_while_frozen" in h
        else ""
    )
    return [
        "## Handover between triggerers",
        "",
        f"{h['jobs']} deferred jobs, half on each of {h['triggerers']} triggerers; one frozen "
        f"(SIGSTOP) for {h['frozen_s']} s, past `triggerer_health_check_threshold` (15 s); "
        + ended,
        "",
        "| jobs | triggerers | frozen_s | takeover_s | reassigned | jobs_deleted "
        "| wrong_verdicts | duplicates | trial |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {h['jobs']} | {h['triggerers']} | {h['frozen_s']} | {h['takeover_s']} "
        f"| {h['reassigned']} | {h['jobs_deleted']} | {h['wrong_verdicts']} "
        f"| {fig('duplicates')} | {passed} |",
    ]


def handover_goals(h: dict | None) -> list[str]:
    if not h or "error" in h:
        return [f"handover: did not run ({h['error']})"] if h else []
    kept = h["jobs_deleted"] == 0 and h["wrong_verdicts"] == 0 and h.get("duplicates", 0) == 0
    duplicates = h.get("duplicates", "not recorded")
    return [
        f"a triggerer handover deletes no job and every verdict is right: "
        f"{'met' if kept else 'MISSED'} ({h['jobs_deleted']} deleted, {h['wrong_verdicts']} "
        f"wrong, {duplicates} duplicates of {h['jobs']}; takeover {h['takeover_s']} s)"
    ]

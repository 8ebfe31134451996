"""10. handover (issue 26): a triggerer frozen past its health-check threshold while
``--handover-jobs`` deferred jobs are spread over two triggerers of a production-shaped
Airflow. The driver is ``tests/reliability/test_ha_airflow.py``'s handover trial, run as a
program (``common.trial``); its figures come back through ``test-artifacts/reliability``.
"""

from __future__ import annotations

from common import say, table, trial

KEYS = ("handover",)
NEEDS = "cluster"
OPTIONS = {"handover_jobs": (20, 4, "deferred jobs handed over")}
TRIAL = (
    "tests/reliability/test_ha_airflow.py"
    "::test_a_frozen_triggerer_hands_its_jobs_over_and_none_is_deleted"
)


def run(ctx) -> dict:
    """Run the trial with ``--handover-jobs`` deferred jobs; its figures, and whether it passed."""
    jobs = ctx.handover_jobs
    env = {"AVW_HANDOVER_JOBS": str(jobs), "AVW_CLUSTER_STATE_DIR": str(ctx.cluster.state_dir)}
    env["EXECUTOR"] = "local"  # as measured and reported; Celery's figures are still to come
    say(f"handover: {jobs} deferred jobs over two triggerers")
    figures, status = trial(TRIAL, "handover.json", env, say)
    if figures is None:
        return {
            "handover": {"jobs": jobs, "trial_passed": False, "error": f"pytest exited {status}"}
        }
    return {"handover": {**figures, "trial_passed": status == 0}}


def section(r: dict) -> list[str]:
    h = r["handover"]
    if "error" in h:
        return [f"The trial did not run: {h['error']}."]
    passed = "passed" if h["trial_passed"] else "FAILED"
    ended = f"{h['ended_while_frozen']} of its jobs ended meanwhile, the rest right after the thaw."
    head = "jobs | triggerers | frozen_s | takeover_s | reassigned | jobs_deleted "
    keys = [*head.split(" | "), "wrong_verdicts"]
    return [
        f"{h['jobs']} deferred jobs, half on each of {h['triggerers']} triggerers; one frozen "
        f"(SIGSTOP) for {h['frozen_s']} s, past `triggerer_health_check_threshold` (15 s); "
        + ended,
        "",
        *table(
            head + "| wrong_verdicts | duplicates | trial",
            [*(h[k.strip()] for k in keys), h["duplicates"], passed],
        ),
    ]


def goals(h: dict | None) -> list[str]:
    if "error" in h:
        return [f"handover: did not run ({h['error']})"]
    kept = h["jobs_deleted"] == 0 and h["wrong_verdicts"] == 0 and h["duplicates"] == 0
    duplicates = h["duplicates"]
    return [
        f"a triggerer handover deletes no job and every verdict is right: "
        f"{'met' if kept else 'MISSED'} ({h['jobs_deleted']} deleted, {h['wrong_verdicts']} "
        f"wrong, {duplicates} duplicates of {h['jobs']}; takeover {h['takeover_s']} s)"
    ]

"""The benchmarks' report: ``latest.md`` from the results, and the goals they meet or miss.

A section per scenario present: a partial run (``run_all.py --only``) may lack some.
"""

from __future__ import annotations

from e2e_real_airflow import e2e_real_airflow_goals, md_e2e_real_airflow
from handover import handover_goals, md_handover
from live_progress import md_live_progress
from scenario_latency import latency_goals, md_latency
from scenario_namespace_scale import md_namespace, namespace_goals
from scenario_odd_paths import md_odd_paths
from scenario_outage import md_outage, outage_goals
from scenario_overhead import md_e2e, md_operator
from scenario_resume import md_resume
from scenario_scale import md_scale, scale_goals
from scenario_sweep_burst import md_sweep


def markdown(r: dict) -> str:
    lines = [
        "# Benchmarks (latest run)",
        "",
        f"{r['meta']['date']}, {r['meta']['cpus']} CPUs, Python {r['meta']['python']}, "
        f"load average before: {r['meta']['load_before']}; total {r['meta']['total_s']:.0f} s. "
        "Reproduce: `make bench`."
        + (" Quick mode (smoke-test sizes)." if r["meta"].get("quick") else ""),
        "",
    ]
    # A section per scenario present: a partial run (--only) may lack some.
    sections = (
        ("completion_latency_s", md_latency),
        ("triggerer_scale", md_scale),
        ("submit_overhead_s", md_operator),
        ("render_ms", md_operator),
        ("e2e_overhead_s", md_e2e),
        ("namespace_scale", md_namespace),
        ("outage", md_outage),
        ("sweep_burst", md_sweep),
        ("live_progress", md_live_progress),
        ("odd_paths", md_odd_paths),
        ("handover", md_handover),
        ("e2e_real_airflow", md_e2e_real_airflow),
        ("resume", md_resume),
    )
    shown: set = set()
    for key, section in sections:
        if key in r and section not in shown:
            shown.add(section)
            lines += [*section(r), ""]
    lines += ["## Goals", ""]
    lines += [f"- {g}" for g in r["goals"]]
    return "\n".join(lines) + "\n"


def goals(r: dict) -> list[str]:
    """Each goal of the scenarios that ran, met or not, in the report's order."""
    out = latency_goals(r.get("completion_latency_s"))
    out += namespace_goals(r.get("namespace_scale")) + outage_goals(r.get("outage"))
    out += handover_goals(r.get("handover"))
    out += e2e_real_airflow_goals(r.get("e2e_real_airflow"))
    out += scale_goals(r.get("triggerer_scale"))
    return out

"""The benchmarks' report: ``latest.md`` from the results, and the goals they meet or miss.

A section per scenario present: a partial run (``run_all.py --only``) may lack some.
"""

from __future__ import annotations

from e2e_real_airflow import e2e_real_airflow_goals, md_e2e_real_airflow
from live_progress import md_live_progress
from scenario_handover import handover_goals, md_handover
from scenario_latency import latency_goals, md_latency
from scenario_namespace_scale import md_namespace, namespace_goals
from scenario_odd_paths import md_odd_paths
from scenario_outage import md_outage, outage_goals
from scenario_overhead import md_e2e, md_operator
from scenario_parse_light import md_parse_light, parse_light_goals
from scenario_pod_cache import md_pod_cache
from scenario_resume import md_resume
from scenario_scale import md_scale, scale_goals
from scenario_sweep_burst import md_sweep


def _scenario_line(meta: dict) -> str:
    """Where a section's figures come from: their own run's date, machine and load."""
    if meta.get("carried_over"):
        return f"_Carried over, not measured by this tool: {meta['carried_over']}._"
    line = (
        f"_Measured {meta['date']} on {meta['cpus']} CPUs, load average before "
        f"{meta['load_before']}"
        + (", smoke-test sizes (`--quick`)" if meta.get("quick") else "")
        + (f", commit {meta['commit']}" if meta.get("commit") else "")
        + (f"; `{meta['how']}`" if meta.get("how") else "")
        + "._"
    )
    if meta.get("note"):
        line += f" {meta['note']}"
    return line


def markdown(r: dict) -> str:
    per_scenario = r.get("scenario_meta")
    if per_scenario:
        lines = [
            "# Benchmarks (the latest figures of every scenario)",
            "",
            "Each section's figures come from that scenario's latest run, whose date, load "
            "average before it and command head the section; a partial run (`--only`) or a "
            "script's `--record` replaces its own scenario's only. Reproduce: `make bench`.",
            "",
        ]
    else:  # a results file from before scenarios had their own dates
        lines = [
            "# Benchmarks (latest run)",
            "",
            f"{r['meta']['date']}, {r['meta']['cpus']} CPUs, Python {r['meta']['python']}, "
            f"load average before: {r['meta']['load_before']}; total "
            f"{r['meta']['total_s']:.0f} s. Reproduce: `make bench`."
            + (" Quick mode (smoke-test sizes)." if r["meta"].get("quick") else ""),
            "",
        ]
    # A section per scenario present: a partial run (--only) may lack some.
    sections = (
        ("completion_latency_s", md_latency, "latency"),
        ("triggerer_scale", md_scale, "scale"),
        ("submit_overhead_s", md_operator, "e2e"),
        ("render_ms", md_operator, "render"),
        ("e2e_overhead_s", md_e2e, "e2e"),
        ("namespace_scale", md_namespace, "namespace_scale"),
        ("outage", md_outage, "outage"),
        ("sweep_burst", md_sweep, "sweep_burst"),
        ("live_progress", md_live_progress, "live_progress"),
        ("odd_paths", md_odd_paths, "odd_paths"),
        ("handover", md_handover, "handover"),
        ("e2e_real_airflow", md_e2e_real_airflow, "e2e_real_airflow"),
        ("resume", md_resume, "resume"),
        ("real_pods", md_real_pods, "real_pods"),
        ("pod_cache", md_pod_cache, "pod_cache"),
        ("parse_light", md_parse_light, "parse_light"),
    )
    shown: set = set()
    for key, section, scenario in sections:
        if key in r and section not in shown:
            shown.add(section)
            body = section(r)
            # md_operator shows both render's and e2e's figures: each says its own date.
            names = ["e2e", "render"] if section is md_operator else [scenario]
            dated = [  # once, when both have the same
                *dict.fromkeys(
                    _scenario_line(per_scenario[name])
                    for name in names
                    if per_scenario and name in per_scenario
                )
            ]
            lines += [*body[:1], *(["", *dated] if dated else []), *body[1:], ""]
    lines += ["## Goals", ""]
    lines += [f"- {g}" for g in r["goals"]]
    return "\n".join(lines) + "\n"


def md_real_pods(r: dict) -> list[str]:
    p = r["real_pods"]
    return [
        "## Real pods (the cluster's real kubelet node)",
        "",
        "`bench/real_pods.py`: the manual DAG's master + 2 workers trained for real (DDP over "
        f"gloo): pods ready {p['pods_ready_s']} s after the job was created, the master "
        f"trained {p['train_s']} s, the wait task succeeded {p['completion_to_task_success_s']} "
        "s after the job's `Completed`"
        + (f"; trainer image {p['image_mb']} MB" if p.get("image_mb") else "")
        + (f", cold image build {p['image_build_s_cold']} s" if p.get("image_build_s_cold") else "")
        + ".",
    ]


def goals(r: dict) -> list[str]:
    """Each goal of the scenarios that ran, met or not, in the report's order."""
    out = latency_goals(r.get("completion_latency_s"))
    out += namespace_goals(r.get("namespace_scale")) + outage_goals(r.get("outage"))
    out += handover_goals(r.get("handover"))
    out += e2e_real_airflow_goals(r.get("e2e_real_airflow"))
    out += scale_goals(r.get("triggerer_scale"))
    out += parse_light_goals(r.get("parse_light"))
    return out

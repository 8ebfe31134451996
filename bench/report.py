"""The scenarios, and their report: ``latest.md`` from the results (a section per scenario
present), and the goals they meet or miss. Each scenario is a module of its own on the shared
driver (``run_all.py``), which reads from it: ``KEYS`` (its keys of ``latest.json``), ``run(ctx)``
(its figures; ``None``: not run, the figures it had are kept), ``section(results)``, and where
it has them ``goals(figures)``, ``OPTIONS`` (``{name: (default, quick, help)}``: ``--name``),
``NEEDS`` (``"cluster"``, or ``"db"``: an Airflow DB too) and ``pods(options)``, the most pods
it holds at once (simulated nodes are added for them).
"""

from __future__ import annotations

import importlib

#: Each scenario's module and its section's heading, in the order the runner runs them.
MODULES = {
    "render": ("render_bench", "3. Operator overhead"),
    "e2e": ("scenario_e2e", "4. End-to-end overhead under `dag.test()`"),
    "latency": ("scenario_latency", "1. Completion-detection latency"),
    "scale": ("scenario_scale", "2. Triggerer scale (one process, one event loop)"),
    "namespace_scale": ("scenario_namespace_scale", "5. A crowded namespace (one triggerer)"),
    "outage": ("scenario_outage", "6. kube-apiserver outage"),
    "sweep_burst": ("scenario_sweep_burst", "7. A sweep's burst"),
    "live_progress": ("scenario_live_progress", "8. Live progress while deferred"),
    "odd_paths": ("scenario_odd_paths", "Odd paths"),
    "handover": ("scenario_handover", "Handover between triggerers"),
    "e2e_real_airflow": (
        "scenario_e2e_real_airflow",
        "End to end through the real scheduler and triggerer",
    ),
    "resume": ("scenario_resume", "Resume on the same run"),
    "real_pods": ("real_pods", "Real pods (the cluster's real kubelet node)"),
    "pod_cache": ("scenario_pod_cache", "The pod watch's memory per pod"),
    "parse_light": ("scenario_parse_light", "Parse light: a DAG file's import"),
}
SCENARIOS = {name: importlib.import_module(module) for name, (module, _) in MODULES.items()}
#: The report's order, which the goals follow too.
ORDER = ("latency", "scale", "render", "e2e", *list(MODULES)[4:])
#: Where not its first key: the keys whose presence shows a section, and the scenarios whose
#: dates head it. ``render``'s section, operator overhead, shows ``e2e``'s submit too.
SHOWS = {"render": ("submit_overhead_s", "render_ms"), "e2e": ("e2e_overhead_s",)}
DATES = {"render": ("e2e", "render")}


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
    return line + (f" {meta['note']}" if meta.get("note") else "")


def markdown(r: dict) -> str:
    per_scenario = r.get("scenario_meta", {})
    lines = [
        "# Benchmarks (the latest figures of every scenario)",
        "",
        "Each section's figures come from that scenario's latest run, whose date, load "
        "average before it and command head the section; a partial run (`--only`) or a "
        "script's `--record` replaces its own scenario's only. Reproduce: `make bench`.",
        "",
    ]
    for name in ORDER:
        if not any(key in r for key in SHOWS.get(name, SCENARIOS[name].KEYS[:1])):
            continue
        metas = [per_scenario[n] for n in DATES.get(name, (name,)) if n in per_scenario]
        dated = [*dict.fromkeys(map(_scenario_line, metas))]  # once, when both are the same
        heading = f"## {MODULES[name][1]}"
        lines += [heading, *(["", *dated] if dated else []), "", *SCENARIOS[name].section(r), ""]
    lines += ["## Goals", ""]
    lines += [f"- {g}" for g in r["goals"]]
    return "\n".join(lines) + "\n"


def goals(r: dict) -> list[str]:
    """Each goal of the scenarios that ran, met or not, in the report's order."""
    modules = [SCENARIOS[name] for name in ORDER if hasattr(SCENARIOS[name], "goals")]
    return [g for module in modules for g in module.goals(r.get(module.KEYS[0]))]

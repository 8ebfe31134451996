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

from common import NotMeasured

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
    "elastic": ("scenario_elastic", "Elastic workers against a restart (real node)"),
    "pod_cache": ("scenario_pod_cache", "The pod watch's memory per pod"),
    "training_page": ("scenario_training_page", "The Training page"),
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
    """Where a section's figures come from: their own run's provenance."""
    dirty = {True: " with uncommitted changes", False: "", None: " (clean or not: not recorded)"}
    took = f"in {meta['took_s']} s" if "took_s" in meta else "duration not recorded"
    return (
        f"_Measured {meta['date']} on {meta['cpus']} CPUs, load average before "
        f"{meta['load_before']}"
        + (", smoke-test sizes (`--quick`)" if meta["quick"] else "")
        + f", commit {meta['commit']}{dirty[meta.get('commit_dirty')]}, {took}; "
        + f"`{meta['how']}`._"
    )


def markdown(r: dict) -> str:
    per_scenario = r.get("scenario_meta", {})
    lines = [
        "# Benchmarks (the latest figures of every scenario)",
        "",
        "Each section's figures come from that scenario's latest run, whose date, load "
        "average before it, commit and command head the section; a partial run (`--only`) "
        "replaces its own scenarios' only. `bench/run_all.py` is the file's only writer: a "
        'scenario that no run of it measured is absent, and its goals read "not measured". '
        "Reproduce: `make bench`.",
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
    """Each scenario's goals, in the report's order: met or MISSED where its figures are all
    there, "not measured" where it did not run or a figure a goal reads is missing or None."""
    out = []
    for name in (name for name in ORDER if hasattr(SCENARIOS[name], "goals")):
        key = SCENARIOS[name].KEYS[0]
        if key not in r:
            out.append(f"{name}: not measured")
            continue
        try:
            out += SCENARIOS[name].goals(r[key])
        except (KeyError, IndexError, TypeError, NotMeasured) as missing:
            out.append(f"{name}: not measured (a figure is missing: {missing})")
    return out

"""Run every benchmark on the local Volcano cluster; write bench/results/latest.{json,md}.

    make bench                     # cluster-up, then this script
    .venv/bin/python bench/run_all.py --cluster-dir .state/cluster [--quick] [--only a,b]

The shared driver of the scenarios (``report.MODULES``). ``--only`` merges into the results
there (``resume``, ``pod_cache``, ``parse_light`` need no ``--cluster-dir``); each scenario is
written as it ends, with its provenance (``results_file.scenario_meta``): the only writer of
``latest.json``. Simulated nodes are added
for the scenarios' pods and removed at the end. Figures, not a test: nothing asserts on time.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file
from common import PY, REPO, RESULTS, Cluster, airflow_env, say
from report import SCENARIOS, markdown

#: The exact command, as each scenario's provenance names it.
COMMAND = shlex.join(["bench/run_all.py", *sys.argv[1:]])


def parse_options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster-dir", type=Path, help="the local cluster (make cluster-up)")
    parser.add_argument("--window", type=float, default=30.0, help="a waiter's window (s)")
    quick = {"window": 10}
    for module in SCENARIOS.values():
        for name, (default, small, about) in getattr(module, "OPTIONS", {}).items():
            flag = f"--{name.replace('_', '-')}"
            parser.add_argument(flag, type=type(default), default=default, help=about)
            if small is not None:
                quick[name] = small
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    names = ",".join(SCENARIOS)
    parser.add_argument("--only", default=names, help=f"comma-separated subset of {names}")
    parser.add_argument("--results", type=Path, default=RESULTS, help="latest.json/md's folder")
    parser.add_argument("--keep-work", action="store_true", help="keep the raw files")
    parser.add_argument("--report-only", action="store_true", help="latest.md from latest.json")
    options = parser.parse_args(argv)
    if options.quick:
        vars(options).update(quick)
    asked = set(options.only.split(","))
    options.only = [name for name in SCENARIOS if name in asked]
    if unknown := asked - set(SCENARIOS):
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {names}")
    needs = {getattr(SCENARIOS[name], "NEEDS", None) for name in options.only}
    if needs - {None} and not options.cluster_dir and not options.report_only:
        parser.error("--cluster-dir: these scenarios run on the local cluster")
    return options


def run_scenarios(ctx: argparse.Namespace) -> None:
    """Each scenario asked for, in order, each written into the results file as it ends, so a
    run cut short keeps what it did."""
    if any(getattr(SCENARIOS[name], "NEEDS", None) == "db" for name in ctx.only):
        say("airflow db migrate")
        argv = [PY, "-m", "airflow", "db", "migrate"]
        subprocess.run(argv, env=ctx.env, check=True, capture_output=True)
    for name in ctx.only:
        say(name)
        load, code = results_file.load_before(), results_file.code_state()  # as it starts
        started = time.monotonic()
        figures = SCENARIOS[name].run(ctx)
        if figures is None:
            continue
        say(f"{name}: {json.dumps(figures)[:2000]}")
        took_s = time.monotonic() - started
        meta = results_file.scenario_meta(
            load, quick=ctx.quick, how=COMMAND, code=code, took_s=took_s
        )
        results_file.record(name, figures, meta, ctx.results)


def main() -> None:
    ctx = parse_options()
    if ctx.report_only:
        results_file.write(results_file.read(ctx.results), ctx.results)
        return
    ctx.cluster = Cluster(ctx.cluster_dir) if ctx.cluster_dir else None
    ctx.work = Path(tempfile.mkdtemp(prefix="avw-bench-"))
    home = ctx.work / "airflow"
    shutil.copytree(REPO / "dags", home / "dags", dirs_exist_ok=True)
    shutil.copytree(REPO / "tests" / "dags", home / "dags", dirs_exist_ok=True)
    ctx.env = airflow_env(home, ctx.cluster.kubeconfig if ctx.cluster else home / "kubeconfig")
    added: list[str] = []
    if ctx.cluster:
        say(f"work dir {ctx.work}; cluster {ctx.cluster.server}")
        pods = [SCENARIOS[name].pods(ctx) for name in ctx.only if hasattr(SCENARIOS[name], "pods")]
        added = ctx.cluster.ensure_pod_capacity(max(pods, default=0) + 50)
        if added:
            say(f"added {len(added)} simulated nodes for capacity")
    try:
        run_scenarios(ctx)
    finally:
        # Pods go with their namespaces; only then may their simulated nodes go.
        if ctx.cluster and ctx.cluster.wait_namespaces_gone(timeout=600):
            ctx.cluster.delete_nodes(added)
        elif added:
            say(f"namespaces still terminating; left nodes {added}")
        if not ctx.keep_work:
            shutil.rmtree(ctx.work, ignore_errors=True)
    results = results_file.read(ctx.results)
    print(markdown(results))
    say(f"wrote {ctx.results}/latest.json and latest.md")


if __name__ == "__main__":
    main()

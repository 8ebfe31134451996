"""Run every benchmark on the local Volcano cluster; write bench/results/latest.{json,md}.

    make bench                     # cluster-up, then this script
    .venv/bin/python bench/run_all.py --cluster-dir .state/cluster [--quick]

Measures, each side by side with polling baselines in the same run (issue 8):

1. completion-detection latency: provider trigger (shared watch) vs polling every 2 s and
   10 s through the same hook, against an independent observer's watch and against
   Volcano's lastTransitionTime;
2. triggerer scale: N = 100, 500, 1000 triggers in one event loop driven by Airflow's
   TriggerRunner (bench/trigger_driver.py), provider vs 2 s polling: watch connections and
   requests per minute from the apiserver's /metrics, CPU and RSS of that process;
3. operator overhead: execute() start to job created; render_job (bench/render_bench.py);
4. end-to-end overhead under dag.test(), sync vs deferrable (bench/e2e_bench.py);
5. namespace_scale (issue 11): one triggerer, --namespace-waiting triggers (1000) among
   --namespace-jobs other owners' jobs (10000) in one namespace, ours Running with 3 pods
   each: RSS growth, watch connections, first (paginated, label-selected) LIST, requests;
   vc-controller-manager is stopped while the others are made and measured (see
   namespace_scale());
6. outage (issue 11): kube-apiserver stopped for --outage-s (300 s) while --outage-waiting
   triggers (1000) wait: LIST/WATCH attempts counted in the triggerer against the backoff's
   bound, then every verdict checked against the job's real end, and no job deleted;
7. sweep_burst (issue 17): --sweep-tasks (200) mapped task instances of the operator submit
   at once, then again as retries (bench/sweep_burst.py): submit p50/p99, duplicates, 429s;
   then their wait by the provider's trigger and by 2 s polling (watch connections, req/min);
8. live_progress (issue 15): --live-jobs (100) waiting triggers with master log following
   off vs on: CPU seconds and RSS of the triggerer process (bench/live_progress.py);
9. odd_paths (issue 21): paths a deployment meets once in a while (bench/odd_paths.py):
   restart_false_timeouts, pending timeouts of whole gangs over 20 restarts of every trigger
   with evictions in flight; fixed_name_retries_ok, a retry under a fixed job_name after a
   failed try.
10. handover (issue 26): --handover-jobs (20) deferred jobs over two triggerers of a
    production-shaped Airflow, one frozen past its health-check threshold: jobs deleted,
    wrong verdicts, triggers reassigned, takeover time (bench/handover.py runs the HA trial).
11. e2e_real_airflow (issue 26): --e2e-real-tasks (50) deferred tasks through the real
    scheduler and triggerer of the same production-shaped Airflow: job Completed to task
    success, p50/p99, jobs that end at once (inside defer_settle_seconds) apart from jobs that
    end after it (bench/e2e_real_airflow.py runs tests/reliability/test_e2e_real_airflow.py).
12. resume (issue 23): the example trainer stopped by SIGTERM as a preempted pod is, then
    resumed on its run's checkpoints: steps_before_kill, resumed_from_step, steps_repeated,
    resume_overhead_s, saved_training_s, saved_gpu_seconds, and the same with the checkpoints
    in a W&B artifact (artifact, artifact_overhead_ratio) (bench/resume_bench.py; local
    processes, no cluster).
13. pod_cache (issue 35): what the shared pod watch keeps per running pod, side by side with
    the pod as the API sends it (bench/pod_cache_bench.py; Python only, no cluster).
14. parse_light (issue 42): each example DAG file's import beside a DAG of Airflow's standard
    operators, `python -X importtime` in fresh interpreters, in turns; the Kubernetes and W&B
    client modules it loaded (bench/scenario_parse_light.py; no cluster).

--quick runs every scenario at smoke-test sizes; --only picks scenarios (a partial run
merges into the results already there); --results writes elsewhere than bench/results.

Adds simulated nodes to the cluster for the 1000 jobs and removes them (and its namespaces)
at the end. A script that prints figures: nothing here asserts on time.

This file is the runner (options, the scenarios in order, the results files); each scenario
is a module of its own (``scenario_*.py``, ``live_progress.py``, ``handover.py``,
``e2e_real_airflow.py``: its run, its report section and its goals), the processes they
measure are started by ``waiters.py``, and ``report.py`` writes ``latest.md``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import results_file
from common import PY, REPO, RESULTS, T0, Cluster, airflow_env, say
from e2e_real_airflow import e2e_real_airflow
from handover import handover
from live_progress import live_progress
from pod_cache_bench import measure as pod_cache
from report import markdown
from scenario_latency import completion_latency, latency_figures
from scenario_namespace_scale import namespace_scale
from scenario_odd_paths import odd_paths
from scenario_outage import outage
from scenario_overhead import end_to_end, render
from scenario_parse_light import measure as parse_light
from scenario_resume import resume
from scenario_scale import DEFAULT_WAITERS, WAITERS, triggerer_scale
from scenario_sweep_burst import sweep_burst
from waiters import driver

SCENARIOS = (
    "render",
    "e2e",
    "latency",
    "scale",
    "namespace_scale",
    "outage",
    "sweep_burst",
    "live_progress",
    "odd_paths",
    "handover",
    "e2e_real_airflow",
    "resume",
    "pod_cache",
    "parse_light",
)


def parse_options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster-dir", type=Path, required=True)
    parser.add_argument("--sizes", default="100,500,1000", help="triggerer scale N values")
    parser.add_argument("--latency-jobs", type=int, default=100)
    parser.add_argument("--e2e-runs", type=int, default=4, help="dag.test() runs per mode")
    parser.add_argument("--window", type=float, default=30.0, help="scale window (s)")
    parser.add_argument(
        "--scale-waiters",
        default=",".join(DEFAULT_WAITERS),
        help=f"triggerer scale's waiters, of {sorted(WAITERS)}",
    )
    parser.add_argument(
        "--namespace-jobs", type=int, default=10000, help="other owners' jobs beside ours"
    )
    parser.add_argument("--namespace-waiting", type=int, default=1000, help="waiting triggers")
    parser.add_argument("--outage-s", type=float, default=300.0, help="apiserver outage (s)")
    parser.add_argument("--outage-waiting", type=int, default=1000, help="triggers waiting")
    parser.add_argument("--sweep-tasks", type=int, default=200, help="mapped tasks at once")
    parser.add_argument("--live-jobs", type=int, default=100, help="jobs followed (or not)")
    parser.add_argument("--live-lines", type=int, default=200, help="log lines per master")
    parser.add_argument("--live-runs", type=int, default=3, help="runs per side, for medians")
    parser.add_argument("--handover-jobs", type=int, default=20, help="deferred jobs handed over")
    parser.add_argument(
        "--e2e-real-tasks", type=int, default=50, help="deferred tasks through the real Airflow"
    )
    parser.add_argument("--e2e-real-wave", type=int, default=10, help="tasks started together")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument(
        "--only", default=",".join(SCENARIOS), help=f"comma-separated subset of {SCENARIOS}"
    )
    parser.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="where latest.json/md go; a partial run (--only) merges into what is there",
    )
    parser.add_argument("--keep-work", action="store_true", help="keep the raw files")
    parser.add_argument(
        "--report-only", action="store_true", help="re-render latest.md from latest.json"
    )
    options = parser.parse_args()
    if options.quick:
        options.sizes, options.latency_jobs, options.e2e_runs, options.window = "20,50", 20, 1, 10
        options.namespace_jobs, options.namespace_waiting = 200, 20
        options.outage_s, options.outage_waiting = 20.0, 20
        options.sweep_tasks = 10
        options.live_jobs, options.live_runs = 20, 1
        options.handover_jobs = 4
        options.e2e_real_tasks, options.e2e_real_wave = 6, 6
    options.only = set(options.only.split(","))
    unknown = options.only - set(SCENARIOS)
    if unknown:
        parser.error(f"unknown scenarios {sorted(unknown)}; choose from {SCENARIOS}")
    return options


def pods_needed(options) -> int:
    """The most pods the scenarios asked for hold at once (the scale, namespace and outage
    jobs have a master and two workers each): simulated nodes are added for them."""
    only = options.only
    scale = 3 * max(int(s) for s in options.sizes.split(",")) if "scale" in only else 0
    latency = options.latency_jobs if "latency" in only else 0
    return max(
        scale + latency,
        3 * options.outage_waiting if "outage" in only else 0,
        3 * options.namespace_waiting if "namespace_scale" in only else 0,
        options.live_jobs if "live_progress" in only else 0,
        3 * options.sweep_tasks if "sweep_burst" in only else 0,
    )


def run_scenario(name: str, options, cluster: Cluster, env: dict, work: Path) -> dict:
    """One scenario's figures, under its keys of ``results_file.SCENARIO_KEYS``."""
    sizes = [int(s) for s in options.sizes.split(",")]
    if name == "render":
        return {"render_ms": render(repeat=500)}
    if name == "e2e":
        e2e = end_to_end(cluster, env, work, options.e2e_runs)
        return {
            "submit_overhead_s": e2e["submit_overhead_s"],
            "e2e_overhead_s": e2e["e2e"],
            "e2e_sim_duration_s": e2e["sim_duration_s"],
        }
    if name == "latency":
        figures = completion_latency(cluster, env, work, options.latency_jobs)
        return {"completion_latency_s": latency_figures(figures)}
    if name == "scale":
        waiters = tuple(options.scale_waiters.split(","))
        scale = triggerer_scale(cluster, env, work, sizes, options.window, waiters)
        return {"triggerer_scale": scale.pop("rows"), "scale_meta": scale}
    if name == "namespace_scale":
        return {
            "namespace_scale": namespace_scale(
                cluster,
                env,
                work,
                options.namespace_jobs,
                options.namespace_waiting,
                options.window,
            )
        }
    if name == "sweep_burst":
        return {"sweep_burst": sweep_burst(cluster, env, work, options.sweep_tasks, options.window)}
    if name == "live_progress":
        return {
            "live_progress": live_progress(
                cluster,
                env,
                work,
                driver,
                say,
                jobs=options.live_jobs,
                lines=options.live_lines,
                window=options.window,
                runs=options.live_runs,
            )
        }
    if name == "outage":
        return {"outage": outage(cluster, env, work, options.outage_waiting, options.outage_s)}
    if name == "odd_paths":
        return {"odd_paths": odd_paths(cluster, env, work, options.quick)}
    if name == "handover":
        return {"handover": handover(options.cluster_dir, options.handover_jobs, say)}
    if name == "e2e_real_airflow":
        return {
            "e2e_real_airflow": e2e_real_airflow(
                options.cluster_dir, options.e2e_real_tasks, options.e2e_real_wave, say
            )
        }
    if name == "resume":
        train_s, repeat = (5, 1) if options.quick else (20, 3)
        return {"resume": resume(work, train_s=train_s, repeat=repeat)}
    if name == "pod_cache":
        return {"pod_cache": pod_cache(300 if options.quick else 3000)}
    if name == "parse_light":
        return {"parse_light": parse_light(3 if options.quick else 11, env)}
    raise ValueError(name)


def run_scenarios(options, cluster: Cluster, env: dict, work: Path) -> None:
    """Each scenario asked for, in order, each written into the results file as it ends
    (with its date and the load average before it), so a run cut short keeps what it did."""
    # render needs no Airflow DB; handover and e2e_real_airflow start an Airflow of their own.
    # resume runs the trainer as local processes, pod_cache and parse_light only Python: no
    # Airflow DB, no cluster.
    no_db = {"render", "handover", "e2e_real_airflow", "resume", "pod_cache", "parse_light"}
    if options.only - no_db:
        say("airflow db migrate")
        subprocess.run(
            [PY, "-m", "airflow", "db", "migrate"], env=env, check=True, capture_output=True
        )
    for name in SCENARIOS:
        if name not in options.only:
            continue
        say(name)
        load, commit = results_file.load_before(), results_file.commit()  # as it starts
        figures = run_scenario(name, options, cluster, env, work)
        say(f"{name}: {json.dumps(figures)[:2000]}")
        meta = results_file.scenario_meta(
            load,
            quick=options.quick,
            how=f"bench/run_all.py {' '.join(sys.argv[1:])}",
            commit=commit,
        )
        results_file.record(name, figures, meta, options.results)


def main() -> None:
    options = parse_options()
    out_dir = options.results
    if options.report_only:
        results_file.write(results_file.read(out_dir), out_dir)
        return
    cluster = Cluster(options.cluster_dir)
    work = Path(tempfile.mkdtemp(prefix="avw-bench-"))
    home = work / "airflow"
    shutil.copytree(REPO / "dags", home / "dags", dirs_exist_ok=True)
    shutil.copytree(REPO / "tests" / "dags", home / "dags", dirs_exist_ok=True)
    env = airflow_env(home, cluster.kubeconfig)
    say(f"work dir {work}; cluster {cluster.server}")
    added = cluster.ensure_pod_capacity(pods_needed(options) + 50)
    if added:
        say(f"added {len(added)} simulated nodes for capacity")
    try:
        run_scenarios(options, cluster, env, work)
    finally:
        # Pods go with their namespaces; only then may their simulated nodes go.
        if cluster.wait_namespaces_gone(timeout=600):
            cluster.delete_nodes(added)
        elif added:
            say(f"namespaces still terminating; left nodes {added}")
        if not options.keep_work:
            shutil.rmtree(work, ignore_errors=True)
    results = results_file.read(out_dir)
    results["meta"]["total_s"] = round(time.monotonic() - T0, 1)
    results_file.write(results, out_dir)
    print(markdown(results))
    say(f"wrote {out_dir}/latest.json and latest.md")


if __name__ == "__main__":
    main()

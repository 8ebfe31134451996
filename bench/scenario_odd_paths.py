"""9. Odd paths a deployment meets once in a while, each measured by ``odd_paths.py`` in a
child process: pending timeouts of whole gangs over restarts of every trigger, a crash loop's
detection time, and a retry under a fixed ``job_name`` after a failed try."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from common import PY, REPO, Cluster, say


def odd_paths(cluster: Cluster, env: dict, work: Path, quick: bool) -> dict:
    """Each odd path's figure, measured by ``bench/odd_paths.py`` in a child process each."""
    restart = odd_path(
        cluster, env, work, "restart-false-timeouts", "--restarts", "5" if quick else "20"
    )
    crash = odd_path(cluster, env, work, "crash-loop")
    return {
        "restart_false_timeouts": restart["restart_false_timeouts"],
        "restart_run": restart,
        "crash_loop_detect_s": crash["crash_loop_detect_s"],
        "crash_loop_run": crash,
        "fixed_name_retries_ok": fixed_name_retries_ok(cluster, env, work),
    }


def odd_path(cluster: Cluster, env: dict, work: Path, scenario: str, *args: str) -> dict:
    out = work / f"odd-{scenario}.json"
    argv = [PY, str(REPO / "bench" / "odd_paths.py"), scenario, *args]
    argv += ["--cluster-dir", str(cluster.state_dir), "--out", str(out)]
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads(out.read_text())


def fixed_name_retries_ok(cluster: Cluster, env: dict, work: Path) -> bool:
    """A retry under a fixed ``job_name`` replaces the job its failed try reported and
    succeeds (``bench/odd_paths.py fixed-name``), instead of being refused until the TTL."""
    namespace = cluster.create_namespace("bench-fixed-name")
    out = work / "fixed-name.json"
    script = str(REPO / "bench" / "odd_paths.py")
    subprocess.run(
        [PY, script, "fixed-name", "--namespace", namespace, "--out", str(out)],
        env=env,
        check=True,
    )
    result = json.loads(out.read_text())
    say(f"odd paths: fixed name retry: {result}")
    cluster.delete_namespace(namespace)
    return bool(result["ok"])


def md_odd_paths(r: dict) -> list[str]:
    o = r["odd_paths"]
    lines = ["## Odd paths", ""]
    if "restart_false_timeouts" in o:
        run = o["restart_run"]
        lines.append(
            f"- `restart_false_timeouts`: {o['restart_false_timeouts']} pending timeouts of "
            f"{run['jobs']} jobs whose gang was whole, over {run['restarts']} restarts of every "
            f"trigger with {run['evictions']} workers evicted and kept unplaceable meanwhile "
            f"(`pending_timeout` {run['pending_timeout_s']} s)."
        )
    if "fixed_name_retries_ok" in o:
        lines.append(
            f"- `fixed_name_retries_ok`: {o['fixed_name_retries_ok']} (a retry under a fixed "
            "`job_name` after a failed, reported try replaces that job and succeeds)."
        )
    if "crash_loop_detect_s" in o:
        run = o["crash_loop_run"]
        lines.append(
            f"- `crash_loop_detect_s`: {o['crash_loop_detect_s']} s from a seed master's first "
            "crash under `restartPolicy: OnFailure` to its deferred task's end "
            f"({run['task_state']}, default `max_container_restarts` "
            f"{run['max_container_restarts']}; the simulated kubelet restarts without back-off)."
        )
    return lines

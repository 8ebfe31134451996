"""handover (issue 26): a triggerer frozen past its health-check threshold while N deferred jobs
are spread over two triggerers, on a production-shaped Airflow (PostgreSQL, two schedulers, two
triggerers).

The driver is the HA trial itself, ``tests/reliability/test_ha_airflow.py``'s handover test,
run as a program (pytest in a child process, ``AVW_HANDOVER_JOBS`` jobs, on this cluster): the
benchmark imports nothing from ``tests/``. The trial writes its figures to
``test-artifacts/reliability/handover.json``; they are read back here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from common import REPO

TRIAL = (
    "tests/reliability/test_ha_airflow.py"
    "::test_a_frozen_triggerer_hands_its_jobs_over_and_none_is_deleted"
)
FIGURES = REPO / "test-artifacts" / "reliability" / "handover.json"


def handover(cluster_dir: Path, jobs: int, say: Callable[[str], None]) -> dict[str, Any]:
    """Run the trial with ``jobs`` deferred jobs; its figures, and whether it passed."""
    FIGURES.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
    env.update(AVW_HANDOVER_JOBS=str(jobs), AVW_CLUSTER_STATE_DIR=str(cluster_dir.resolve()))
    say(f"handover: {jobs} deferred jobs over two triggerers ({TRIAL})")
    argv = [sys.executable, "-m", "pytest", TRIAL, "-q", "-p", "no:cacheprovider"]
    proc = subprocess.run(argv, cwd=REPO, env=env, check=False)
    if not FIGURES.exists():
        return {"jobs": jobs, "trial_passed": False, "error": f"pytest exited {proc.returncode}"}
    return {**json.loads(FIGURES.read_text()), "trial_passed": proc.returncode == 0}


def main() -> None:
    """The trial alone, printing its figures; ``--record`` also writes them into the results
    file, as ``run_all.py --only handover`` does."""
    import argparse
    import time

    import results_file

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cluster-dir", type=Path, required=True)
    parser.add_argument("--jobs", type=int, default=20, help="deferred jobs handed over")
    results_file.add_record_option(parser)
    options = parser.parse_args()
    load = results_file.load_before()
    t0 = time.monotonic()
    result = handover(options.cluster_dir, options.jobs, lambda m: print(m, flush=True))
    print(json.dumps(result))
    if options.record:
        how = f"bench/handover.py --jobs {options.jobs} ({time.monotonic() - t0:.0f} s)"
        meta = results_file.scenario_meta(load, how=how)
        results_file.record("handover", {"handover": result}, meta, options.record)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()

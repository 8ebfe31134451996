"""Parse light (issue 42): a DAG file's imports load no Kubernetes client and no ``wandb``.

The DAG processor imports every DAG file on every parse, and a worker at every task start:
the example DAGs (and with them the operator, sensor and trigger modules) must leave both
Kubernetes clients and the W&B client to their first use at run time. Measured in a fresh
interpreter, since this one has loaded them for other tests.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DAG_FILES = sorted(str(path) for path in (REPO / "dags").glob("*.py"))
#: What parsing must not load: these packages and everything under them.
RUN_TIME_ONLY = ("kubernetes", "kubernetes_asyncio", "wandb")
SHELLS = (
    "airflow_volcano_wandb.operators.volcano",
    "airflow_volcano_wandb.sensors.volcano",
    "airflow_volcano_wandb.triggers.volcano",
)
# Parses the example DAGs as the DAG processor would, says what is loaded; then loads the sync
# hook, which must bring a client in (else the check below could never see one).
PROBE = """
import json, runpy, sys
for path in sys.argv[1:]:
    runpy.run_path(path, run_name="parse_light_probe")
parsed = sorted(sys.modules)
import airflow_volcano_wandb.hooks.volcano
print(json.dumps({"parsed": parsed, "with_hook": sorted(sys.modules)}))
"""


def _run_time_only(modules: list[str]) -> list[str]:
    return [name for name in modules if name.split(".")[0] in RUN_TIME_ONLY]


def test_parsing_the_example_dags_loads_no_kubernetes_client_and_no_wandb():
    assert len(DAG_FILES) >= 3, DAG_FILES
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *DAG_FILES],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    parsed = loaded["parsed"]
    assert set(SHELLS) <= set(parsed), "the DAGs no longer import the operator and sensor"
    assert _run_time_only(parsed) == []
    assert {"kubernetes", "kubernetes_asyncio"} <= set(_run_time_only(loaded["with_hook"]))

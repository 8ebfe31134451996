"""14. parse_light (issue 42; no cluster): a DAG file's import, paid at each parse and task
start. Each example DAG beside a DAG of Airflow's standard operators, in turns, each in a
fresh interpreter under ``python -X importtime`` after an uncounted first turn; medians, the
median of the paired ratios to the standard DAG, and the client modules loaded.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from common import REPO

KEYS = ("parse_light",)
OPTIONS = {"parse_light_runs": (11, 3, "timed imports of each DAG")}
DAGS = ("volcano_pytorch_manual", "volcano_pytorch_retraining", "volcano_pytorch_sweep")
STANDARD = """import datetime, pendulum
from airflow.sdk import DAG
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor
with DAG("standard_operators", schedule=None, start_date=pendulum.datetime(2026, 1, 1)):
    TimeDeltaSensor(task_id="wait", delta=datetime.timedelta(seconds=1)) >> BashOperator(
        task_id="run", bash_command="true") >> PythonOperator(task_id="end", python_callable=print)
"""


def _import(module: str, env: dict) -> tuple[float, list[str]]:
    """The module's cumulative import time (ms) and the modules it loaded."""
    argv = [sys.executable, "-X", "importtime", "-c", f"import {module}"]
    err = subprocess.run(argv, env=env, cwd=REPO, capture_output=True, text=True, check=True).stderr
    rows = [line.split("|") for line in err.splitlines() if line.startswith("import time:")]
    names = [row[2].strip() for row in rows[1:]]
    return int(rows[names.index(module) + 1][1]) / 1000, names


def run(ctx) -> dict:
    return {"parse_light": measure(ctx.parse_light_runs, ctx.env)}


def measure(runs: int, env: dict | None = None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="avw-parse-light-"))
    (work / "standard_operators.py").write_text(STANDARD)
    env = {k: v for k, v in (env or os.environ).items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.setdefault("AIRFLOW_HOME", str(work / "airflow"))
    env.setdefault("PYTHONPYCACHEPREFIX", str(Path.home() / ".cache/airflow-volcano-wandb/pycache"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "dags"), str(work), str(REPO)])
    order, times, loaded = ["standard_operators", *DAGS], {}, {}
    for turn in range(runs + 1):
        for dag in order[turn % 4 :] + order[: turn % 4]:
            ms, loaded[dag] = _import(dag, env)
            times.setdefault(dag, []).extend([ms] if turn else [])
    base, clients = times["standard_operators"], ("kubernetes", "kubernetes_asyncio", "wandb")
    p = {"runs": runs, "standard_modules": len(loaded["standard_operators"])}
    p |= {"standard_ms": round(statistics.median(base)), "standard_min_ms": round(min(base))}
    p["load_after"] = round(os.getloadavg()[0], 2)
    for dag in DAGS:  # in the report table's order
        p[dag] = {"ms": round(statistics.median(times[dag])), "min_ms": round(min(times[dag]))}
        p[dag]["modules"] = len(loaded[dag])
        p[dag]["client_modules"] = sum(name.split(".")[0] in clients for name in loaded[dag])
        p[dag]["ratio"] = round(statistics.median(map(float.__truediv__, times[dag], base)), 2)
    return p


def section(r: dict) -> list[str]:
    p = r["parse_light"]
    return [
        f"`python -X importtime`, medians of {p['runs']} fresh interpreters each, in turns: "
        f"the standard operators' DAG {p['standard_ms']} ms, fastest {p['standard_min_ms']} ms "
        f"({p['standard_modules']} modules); load average after {p['load_after']:.2f}.",
        "",
        "| example DAG | ms | fastest ms | modules | client modules | vs standard, paired |",
        "|---|---|---|---|---|---|",
        *(f"| `{d}` | {' | '.join(str(v) for v in p[d].values())} |" for d in DAGS),
    ]


def goals(p: dict | None) -> list[str]:
    worst, clients = max(p[d]["ratio"] for d in DAGS), sum(p[d]["client_modules"] for d in DAGS)
    ok = "met" if worst <= 1.2 and clients == 0 else "MISSED"
    return [f"DAG import <= 1.2x standard operators', no client: {ok} ({worst}x, {clients})"]

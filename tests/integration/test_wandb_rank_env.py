"""The rank env contract with the real wandb SDK in offline mode (no W&B server involved).

Two local processes play the master and worker pods of a 2-rank job: each gets exactly the env
``container_env`` produces (Secret and Downward API values resolved as the kubelet would) plus
what Volcano's pytorch plugin adds (RANK, WORLD_SIZE), and each naively calls ``wandb.init()``.
The default rank mode must leave exactly one offline run, carrying the Airflow context.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import wandb  # noqa: F401  (a dependency: missing it must fail, not skip)

from airflow_volcano_wandb.wandb.wandb_env import container_env
from airflow_volcano_wandb.wandb.wandb_run import WandbRunSpec
from test_support.wandb_support import airflow_run_context, keyed_run_spec, read_wandb_records

NAIVE_TRAINER = textwrap.dedent(
    """
    import os
    import wandb
    from airflow_volcano_wandb.wandb.wandb_env import airflow_config_from_env

    # Deliberately naive: every rank calls wandb.init() and logs.
    run = wandb.init(config={"airflow": airflow_config_from_env(os.environ), "lr": 0.1})
    for step in range(3):
        run.log({"loss": 1.0 / (step + 1)})
    run.summary["eval/accuracy"] = 0.9
    run.finish()
    """
)


def resolved_env(spec: WandbRunSpec, *, master: bool, rank: int, wandb_dir: Path) -> dict:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "AIRFLOW_CTX_", "AVW_"))
    }
    for entry in container_env(spec, is_master_task=master):
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry["valueFrom"]:
            env[entry["name"]] = "offline" + "0" * 40  # what the Secret would hold
        else:
            env[entry["name"]] = f"job-{'master' if master else 'worker'}-0"
    env.update(
        RANK=str(rank),
        WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT="23456",
        WANDB_DIR=str(wandb_dir),
        WANDB_SILENT="true",
    )
    return env


def test_master_rank_mode_makes_one_offline_run_with_the_airflow_context(tmp_path: Path) -> None:
    ctx = airflow_run_context(
        try_number=1, task_url="http://airflow.local/dags/retrain/tasks/train"
    )
    spec = keyed_run_spec(ctx, entity="team", project="mlp", mode="offline")
    script = tmp_path / "train.py"
    script.write_text(NAIVE_TRAINER)
    wandb_dir = tmp_path / "wandb-dir"
    wandb_dir.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script)],
            env=resolved_env(spec, master=rank == 0, rank=rank, wandb_dir=wandb_dir),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    for proc in procs:
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out

    runs = sorted((wandb_dir / "wandb").glob("offline-run-*"))
    assert [r.name.rsplit("-", 1)[-1] for r in runs] == [spec.run_id], runs
    (log,) = runs[0].glob("*.wandb")
    (run,) = [r.run for r in read_wandb_records(log) if r.WhichOneof("record_type") == "run"]
    assert run.run_id == spec.run_id
    assert run.display_name == spec.run_name
    assert run.run_group == spec.group
    assert run.job_type == "train"
    assert list(run.tags) == ["airflow", "dag:retrain"]
    assert (run.entity, run.project) == ("team", "mlp")
    config = {item.key: json.loads(item.value_json) for item in run.config.update}
    assert config["airflow"] == {
        "dag_id": "retrain",
        "run_id": ctx.dag_run_id,
        "task_id": "train",
        "try_number": 1,
        "logical_date": ctx.logical_date,
        "task_url": ctx.task_url,
    }

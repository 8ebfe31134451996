"""The example trainer (``docker/trainer/train.py``) run the way its image runs it, for the
trainer tests: ``python train.py`` as local processes on CPU torch, one per rank, with the env a
Volcano job would give each pod (the Secret's key and the Downward API fields resolved the way
the kubelet would); what each rank printed and the offline W&B run it left, read back.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_volcano_wandb.testing.cluster.process import free_ports
from test_support.wandb_support import airflow_run_context, read_wandb_records

REPO = Path(__file__).resolve().parents[1]
TRAIN_PY = REPO / "docker" / "trainer" / "train.py"
LAUNCH_PY = TRAIN_PY.with_name("launch.py")  # the image's ENTRYPOINT
# What the pods would read from the W&B key Secret; must never show up in any output.
FAKE_API_KEY = "avwtest0fake0key0d5a1c3e9b7f2a4c6e8d0b1f3a5c7"
RUN_TIMEOUT_S = 600  # generous: 2 cores shared with a Go build; a normal run takes ~30 s
AIRFLOW_CTX = airflow_run_context(
    dag_id="volcano_pytorch_manual",
    dag_run_id="manual__2026-11-29T10:00:00+00:00",
    logical_date="2026-11-29T10:00:00+00:00",
    task_url="http://localhost:8080/dags/volcano_pytorch_manual/runs/manual__2026-11-29T10%3A00"
    "%3A00%2B00%3A00/tasks/train",
)


def _require_torch() -> None:
    # The brief is "never skip": a missing torch is a broken test environment, said plainly.
    if importlib.util.find_spec("torch") is None:
        pytest.fail(
            "torch is not installed in this environment; the trainer tests need CPU torch. "
            "Install the project's 'train' extra (see docs/trainer.md), e.g. "
            "`uv pip install -e '.[dev,testing,train]'`",
            pytrace=False,
        )


def _resolve(entries: list[dict[str, Any]], pod_name: str) -> dict[str, str]:
    """Turn Kubernetes env entries into plain env, as the kubelet would for a pod."""
    env: dict[str, str] = {}
    for entry in entries:
        if "value" in entry:
            env[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry.get("valueFrom", {}):
            env[entry["name"]] = FAKE_API_KEY
        elif entry.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[entry["name"]] = pod_name
        else:
            raise AssertionError(f"unexpected env entry {entry}")
    return env


def _base_env(tmp_path: Path) -> dict[str, str]:
    """The test process's env minus anything W&B/Airflow/torch.distributed would pick up."""
    drop = ("WANDB_", "AIRFLOW_CTX_", "AVW_", "TRAIN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env.pop("MASTER_ADDR", None)
    env.pop("MASTER_PORT", None)
    env.pop("LOCAL_RANK", None)
    env.update(
        {
            # Keep every W&B file inside tmp_path so the run dirs can be counted.
            "WANDB_DIR": str(tmp_path),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
            "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
            "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
            # Two ranks on two shared cores: one thread each avoids oversubscription.
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@dataclass
class RankResult:
    rank: int
    returncode: int
    output: str


def _start_job(
    tmp_path: Path,
    pod_envs: list[dict[str, str]],
    log_prefix: str = "rank",
    *,
    args: tuple[str, ...] = (str(TRAIN_PY),),
    port: int | None = None,
) -> list[tuple[subprocess.Popen[str], Path]]:
    """Start ``python args`` (the trainer) per pod, with the pytorch plugin's env on ``port``
    (a free one if None); each logs to a file."""
    if port is None:
        (port,) = free_ports(1)
    world_size = len(pod_envs)
    procs: list[tuple[subprocess.Popen[str], Path]] = []
    for rank, pod_env in enumerate(pod_envs):
        env = {
            **_base_env(tmp_path),
            **pod_env,
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "WORLD_SIZE": str(world_size),
            "RANK": str(rank),
        }
        log = tmp_path / f"{log_prefix}-{rank}.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [sys.executable, *args],
                cwd=tmp_path,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
        procs.append((proc, log))
    return procs


def _wait_job(procs: list[tuple[subprocess.Popen[str], Path]]) -> list[RankResult]:
    """Wait for every rank of a started job (killing the rest if one hangs)."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    results = []
    try:
        for rank, (proc, log) in enumerate(procs):
            code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            results.append(RankResult(rank, code, log.read_text()))
    finally:
        for proc, _ in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return results


def _run_job(
    tmp_path: Path, pod_envs: list[dict[str, str]], log_prefix: str = "rank", **start: Any
) -> list[RankResult]:
    """Start one trainer per pod (``_start_job``) and wait for all of them."""
    return _wait_job(_start_job(tmp_path, pod_envs, log_prefix, **start))


@dataclass
class OfflineRun:
    run_dir: Path
    run_id: str
    project: str
    group: str
    job_type: str
    tags: list[str]
    config: dict[str, Any]
    history: list[dict[str, Any]]


def _load_run(run_dir: Path) -> OfflineRun:
    (log,) = run_dir.glob("run-*.wandb")
    run_record = None
    history: list[dict[str, Any]] = []
    for record in read_wandb_records(log):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run_record = record.run
        elif kind == "history":
            history.append(
                {
                    item.key or "/".join(item.nested_key): json.loads(item.value_json)
                    for item in record.history.item
                }
            )
    assert run_record is not None, f"no run record in {log}"
    config = {item.key: json.loads(item.value_json) for item in run_record.config.update}
    return OfflineRun(
        run_dir=run_dir,
        run_id=run_record.run_id,
        project=run_record.project,
        group=run_record.run_group,
        job_type=run_record.job_type,
        tags=list(run_record.tags),
        config=config,
        history=history,
    )


def _run_dirs(tmp_path: Path) -> list[Path]:
    return sorted(p for p in (tmp_path / "wandb").glob("*run-*") if p.is_dir())


def the_run(tmp_path: Path) -> OfflineRun:
    """The one offline run the ranks under ``tmp_path`` wrote (rank 0's; there is no other)."""
    (run_dir,) = _run_dirs(tmp_path)
    return _load_run(run_dir)


def _assert_key_never_leaked(tmp_path: Path, results: list[RankResult]) -> None:
    for result in results:
        assert FAKE_API_KEY not in result.output, f"rank {result.rank} printed the API key"
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.name.startswith("rank-"):
            assert FAKE_API_KEY.encode() not in path.read_bytes(), f"API key written to {path}"


def _assert_ok(results: list[RankResult]) -> None:
    for result in results:
        assert result.returncode == 0, (
            f"rank {result.rank} exited {result.returncode}:\n{result.output[-4000:]}"
        )


def _rendered_rank_env(name: str, **options: Any) -> dict[str, list[dict[str, Any]]]:
    """The env entries the renderer gives the seed's master and worker container (1 worker)."""
    from airflow_volcano_wandb.template import render_job

    job = render_job(
        REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml",
        macros={
            "image_uri": "example.org/trainer:1",
            "run_id": "r1",
            "run_name": "r1",
            "entity_name": "e",
            "project_name": "p",
            "author": "a",
        },
        replicas={"worker": 1},
        name=name,
        namespace="wandb",
        **options,
    )
    return {t["name"]: t["template"]["spec"]["containers"][0]["env"] for t in job["spec"]["tasks"]}

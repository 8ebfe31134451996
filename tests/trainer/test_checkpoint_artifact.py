"""Checkpoints in a W&B artifact (docs/trainer.md, "In a W&B artifact"): pods without a shared
volume, each rank with a directory of its own (an ``emptyDir``), rank 0's online run against
the W&B stand-in (``test_support/wandb_standin.py``), which keeps artifacts as W&B does.

The trainer runs as in ``test_checkpoints.py``: ``python train.py`` as 2 local "pods" over gloo,
with the env the operator gives them; a pod deleted by Volcano is a SIGTERM to its process.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_support.trainer_checkpoints import (
    CHECKPOINT_FILE,
    STEPS_PER_EPOCH,
    _final_loss,
    stop_worker_after_an_epoch,
)
from test_support.trainer_runs import (
    FAKE_API_KEY,
    _assert_ok,
    _run_dirs,
    _run_job,
)
from test_support.wandb_standin import WandbStandin

ENTITY, PROJECT = "ml-team", "volcano-demo"


def _pod_envs(standin: WandbStandin, run_id: str, dirs: Path, **common: str) -> list[dict]:
    """The operator's env for a master and a worker pod (W&B on the master only), each with a
    checkpoint directory of its own under ``dirs``."""
    common = {"AVW_CHECKPOINT_ARTIFACT": f"checkpoint-{run_id}", **common}
    master = {
        **common,
        "WANDB_MODE": "online",
        "WANDB_API_KEY": FAKE_API_KEY,
        "WANDB_BASE_URL": standin.url,
        "WANDB_ENTITY": ENTITY,
        "WANDB_PROJECT": PROJECT,
        "WANDB_RUN_ID": run_id,
        "AVW_CHECKPOINT_DIR": str(dirs / "rank-0" / run_id),
    }
    worker = {**common, "WANDB_MODE": "disabled", "AVW_CHECKPOINT_DIR": str(dirs / "rank-1")}
    return [master, worker]


def _artifact(run_id: str, version: int) -> str:
    return f"{ENTITY}/{PROJECT}/checkpoint-{run_id}:v{version}"


def test_rank_0_logs_every_checkpoint_as_a_committed_artifact_version_on_the_standin(
    tmp_path: Path,
) -> None:
    """Each save (every AVW_CHECKPOINT_EVERY steps and the last) becomes the artifact's next
    version once committed: the file under its own name, its step and seconds of training as
    metadata, aliases ``latest`` and ``step-<N>``. The worker, without W&B, saves nothing."""
    run_id = "artifactsave1"
    with WandbStandin(api_key=FAKE_API_KEY) as standin:
        envs = _pod_envs(standin, run_id, tmp_path / "pods", AVW_CHECKPOINT_EVERY="20")
        results = _run_job(tmp_path, [{**env, "TRAIN_EPOCHS": "2"} for env in envs])
        versions = standin.logged_versions(ENTITY, PROJECT, f"checkpoint-{run_id}")
    _assert_ok(results)
    steps = [20, 40, 60, 64]
    assert [json.loads(v.metadata)["step"] for v in versions] == steps
    assert [v.state for v in versions] == ["COMMITTED"] * 4
    assert [v.artifact_type for v in versions] == ["model"] * 4
    assert [v.aliases for v in versions] == [[f"step-{s}"] for s in steps[:-1]] + [
        ["latest", "step-64"]
    ]
    seconds = [json.loads(v.metadata)["trained_seconds"] for v in versions]
    assert 0 < seconds[0] < seconds[-1]
    directory = tmp_path / "pods" / "rank-0" / run_id
    for version, step in zip(versions, steps, strict=True):
        (name,) = [n for n in version.files if n.startswith("step-")]
        assert name == CHECKPOINT_FILE.format(step)
        local = directory / name
        assert not local.exists() or local.read_bytes() == version.files[name]  # 3 are kept
        line = f"saved checkpoint {local} (W&B artifact {_artifact(run_id, version.version)})"
        assert line in results[0].output
    assert not (tmp_path / "pods" / "rank-1").exists()
    assert "saved checkpoint" not in results[1].output
    assert all(FAKE_API_KEY not in result.output for result in results)


def test_a_stopped_job_resumes_from_the_artifact_on_pods_with_empty_directories_on_the_standin(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    """A SIGTERM mid-way: rank 0 saves and commits one more version, exit 143. A new job of the
    same run (WANDB_RESUME=must) on pods with empty directories: rank 0 downloads the
    artifact's latest version (the run records that it used it), sends it to the worker, and
    both resume from its step, naming the version; it ends as an uninterrupted run does."""
    run_id = "artifactresume1"
    with WandbStandin(api_key=FAKE_API_KEY) as standin:
        common = {"AVW_RESUME_FROM": "latest", "AVW_CHECKPOINT_EVERY": "1000000000"}
        envs = _pod_envs(standin, run_id, tmp_path / "stopped-pods", **common)
        stopping = [{**e, "TRAIN_EPOCHS": "1000000"} for e in envs]
        stopped = stop_worker_after_an_epoch(tmp_path / "stopped", stopping)
        (saved,) = standin.logged_versions(ENTITY, PROJECT, f"checkpoint-{run_id}")
        # The run now exists in W&B, as the first job left it: the new job resumes it.
        standin.add_run(ENTITY, PROJECT, run_id, summary={})

        step = json.loads(saved.metadata)["step"]
        saved_file = CHECKPOINT_FILE.format(step)
        epochs = step // STEPS_PER_EPOCH + 2  # ends mid-way through the epoch after next
        envs = _pod_envs(standin, run_id, tmp_path / "resumed-pods", **common)
        envs[0]["WANDB_RESUME"] = "must"
        (tmp_path / "resumed").mkdir()
        resumed = _run_job(tmp_path / "resumed", [{**e, "TRAIN_EPOCHS": str(epochs)} for e in envs])
        versions = standin.logged_versions(ENTITY, PROJECT, f"checkpoint-{run_id}")
        downloads = [r for r in standin.requests if r.path.endswith(f"/files/{saved_file}")]
        uses = [r.variables for r in standin.requests if r.operation == "UseArtifact"]
    for result in stopped:
        assert result.returncode == 128 + signal.SIGTERM, result.output[-3000:]
    assert f"or W&B artifact checkpoint-{run_id} yet: starting from step 0" in stopped[0].output
    assert step >= STEPS_PER_EPOCH and saved.state == "COMMITTED"
    assert f"(W&B artifact {_artifact(run_id, 0)})" in stopped[0].output

    _assert_ok(resumed)
    trained = json.loads(saved.metadata)["trained_seconds"]
    for result in resumed:
        assert (
            f"resumed from step {step} (checkpoint {_artifact(run_id, 0)}) "
            f"after {trained:.1f} s of training"
        ) in result.output
    # Downloaded (GET) once, by rank 0; the worker got the bytes over the process group.
    assert [r.status for r in downloads] == [200, 200]  # the stop's upload (PUT), the GET
    assert [u["artifactID"] for u in uses] == [saved.artifact_id]
    worker_copy = tmp_path / "resumed-pods" / "rank-1" / saved_file
    assert worker_copy.read_bytes() == saved.files[saved_file]
    # The resumed job's own last save is the next version.
    assert [json.loads(v.metadata)["step"] for v in versions] == [step, epochs * STEPS_PER_EPOCH]
    assert versions[1].aliases == ["latest", f"step-{epochs * STEPS_PER_EPOCH}"]
    assert json.loads(versions[1].metadata)["trained_seconds"] > trained

    plain_env = {"WANDB_MODE": "offline", "TRAIN_EPOCHS": str(epochs)}
    (tmp_path / "plain").mkdir()
    _assert_ok(_run_job(tmp_path / "plain", [dict(plain_env), dict(plain_env)]))
    (resumed_run,) = _run_dirs(tmp_path / "resumed")
    (plain_run,) = _run_dirs(tmp_path / "plain")
    assert _final_loss(resumed_run) == pytest.approx(_final_loss(plain_run), rel=1e-5)
    for result in [*stopped, *resumed]:
        assert FAKE_API_KEY not in result.output


def test_an_artifact_without_an_online_run_on_rank_0_is_refused_at_start(tmp_path: Path) -> None:
    env = {
        "WANDB_MODE": "offline",
        "AVW_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "AVW_CHECKPOINT_ARTIFACT": "checkpoint-run1",
    }
    (result,) = _run_job(tmp_path, [env])
    assert result.returncode == 1, result.output[-3000:]
    assert (
        "AVW_CHECKPOINT_ARTIFACT=checkpoint-run1 needs an online W&B run on rank 0, and "
        "WANDB_MODE=offline sends nothing to W&B"
    ) in result.output
    assert not (tmp_path / "checkpoints").exists()

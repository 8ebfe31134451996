"""The checkpoint contract (docs/trainer.md, "Checkpoints") kept by the example trainer.

The trainer runs as in ``test_train_ddp.py``: ``python train.py`` as 2 local "pods" over gloo,
with the env the provider's renderer gives them (``AVW_CHECKPOINT_DIR``, ``AVW_RESUME_FROM``)
and the pytorch plugin's; a pod deleted by Volcano is a SIGTERM sent to its process.
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace

import pytest

from test_support.trainer_checkpoints import (
    CHECKPOINT_FILE,
    STEPS_PER_EPOCH,
    _final_loss,
    _history_steps,
    stop_worker_after_an_epoch,
)
from test_support.trainer_runs import (
    _assert_ok,
    _run_dirs,
    _run_job,
)


def _checkpoints(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_run_leaves_complete_step_named_checkpoints_and_nothing_else(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    """Every AVW_CHECKPOINT_EVERY steps and at the last step rank 0 saves ``step-<N>.pt``,
    keeping the newest AVW_CHECKPOINT_KEEP; the directory (created by the trainer) holds
    nothing else once it ends."""
    directory = tmp_path / "checkpoints" / "run1"
    env = {
        "WANDB_MODE": "disabled",
        "TRAIN_EPOCHS": "3",
        "AVW_CHECKPOINT_DIR": str(directory),
        "AVW_CHECKPOINT_EVERY": "20",
        "AVW_CHECKPOINT_KEEP": "2",
    }
    results = _run_job(tmp_path, [dict(env), dict(env)])
    _assert_ok(results)
    # Saved at 20, 40, 60, 80 and 96: the older three were deleted as newer ones completed.
    assert _checkpoints(directory) == [CHECKPOINT_FILE.format(s) for s in (80, 96)]
    assert "(deleted 1 older: keeping 2)" in results[0].output
    state = trainer.checkpoints.read_checkpoint(directory / CHECKPOINT_FILE.format(80))
    assert state["step"] == 80 and len(state["epoch_losses"]) == 2
    # The seconds of training the checkpoint stands for: what a resume from it saves.
    last = trainer.checkpoints.read_checkpoint(directory / CHECKPOINT_FILE.format(96))
    assert 0 < state["trained_seconds"] < last["trained_seconds"]
    assert {"model", "optimizer", "rng", "hyper_params"} <= set(state)
    assert "saved checkpoint" in results[0].output
    assert "saved checkpoint" not in results[1].output  # only rank 0 writes


def test_a_stopped_run_saves_the_step_it_reached_and_latest_resumes_there(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    """A SIGTERM to one pod stops every rank after the same step, rank 0 saving it, exit 143.
    A new run with ``AVW_RESUME_FROM=latest`` continues from that step (its first logged step is
    the next), says the seconds of training the checkpoint holds, adds its own to them, and
    ends where an uninterrupted run ends, with the same model."""
    directory = tmp_path / "checkpoints" / "run1"
    common = {
        "AVW_CHECKPOINT_DIR": str(directory),
        "AVW_RESUME_FROM": "latest",
        "AVW_CHECKPOINT_EVERY": "1000000000",  # so the only checkpoint is the stop's
    }
    env = {**common, "WANDB_MODE": "disabled", "TRAIN_EPOCHS": "1000000"}
    stopped = stop_worker_after_an_epoch(tmp_path / "stopped", [dict(env), dict(env)])
    for result in stopped:
        assert result.returncode == 128 + signal.SIGTERM, result.output[-3000:]
    assert "no checkpoint in" in stopped[0].output and "starting from step 0" in stopped[0].output
    (saved,) = _checkpoints(directory)
    step = int(saved.removeprefix("step-").removesuffix(".pt"))
    assert step >= STEPS_PER_EPOCH
    for result in stopped:
        assert f"stopping after step {step}: asked to stop (SIGTERM)" in result.output

    epochs = step // STEPS_PER_EPOCH + 2  # ends mid-way through the epoch after next
    resumed_env = {**common, "WANDB_MODE": "offline", "TRAIN_EPOCHS": str(epochs)}
    (tmp_path / "resumed").mkdir()
    resumed = _run_job(tmp_path / "resumed", [dict(resumed_env), dict(resumed_env)])
    _assert_ok(resumed)
    trained = trainer.checkpoints.read_checkpoint(directory / saved)["trained_seconds"]
    assert trained > 0
    for result in resumed:
        assert (
            f"resumed from step {step} (checkpoint {directory / saved}) "
            f"after {trained:.1f} s of training"
        ) in result.output
    final = directory / CHECKPOINT_FILE.format(epochs * STEPS_PER_EPOCH)
    assert trainer.checkpoints.read_checkpoint(final)["trained_seconds"] > trained  # accumulated
    (resumed_run,) = _run_dirs(tmp_path / "resumed")
    steps = _history_steps(resumed_run)
    assert steps == list(range(step + 1, epochs * STEPS_PER_EPOCH + 1))

    plain_env = {"WANDB_MODE": "offline", "TRAIN_EPOCHS": str(epochs)}
    (tmp_path / "plain").mkdir()
    _assert_ok(_run_job(tmp_path / "plain", [dict(plain_env), dict(plain_env)]))
    (plain_run,) = _run_dirs(tmp_path / "plain")
    assert _history_steps(plain_run)[-1] == steps[-1]
    assert _final_loss(resumed_run) == pytest.approx(_final_loss(plain_run), rel=1e-5)


def test_resuming_from_a_checkpoint_that_does_not_exist_fails_naming_it(tmp_path: Path) -> None:
    missing = tmp_path / "checkpoints" / "step-000000007.pt"
    env = {"WANDB_MODE": "disabled", "AVW_RESUME_FROM": str(missing)}
    (result,) = _run_job(tmp_path, [env])
    assert result.returncode != 0
    assert f"AVW_RESUME_FROM: no checkpoint at {missing}" in result.output, result.output[-3000:]


def test_latest_is_the_highest_step_and_never_a_save_in_progress(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    assert trainer.checkpoints.latest_checkpoint(tmp_path / "absent") is None
    for name in ("step-000000999.pt", "step-1000000000.pt", ".step-2000000000.pt.7.tmp"):
        (tmp_path / name).write_bytes(b"")
    (tmp_path / "step-3000000000.pt").mkdir()  # not a file
    assert trainer.checkpoints.latest_checkpoint(tmp_path) == tmp_path / "step-1000000000.pt"


def test_a_save_that_fails_leaves_no_checkpoint(tmp_path: Path, trainer: SimpleNamespace) -> None:
    with pytest.raises(Exception):  # noqa: B017 (pickle's error type is no part of the contract)
        trainer.checkpoints.save_checkpoint(tmp_path, 5, {"unpicklable": lambda: None})
    assert list(tmp_path.iterdir()) == []
    path = trainer.checkpoints.save_checkpoint(tmp_path / "new", 5, {"step": 5})
    assert path == tmp_path / "new" / "step-000000005.pt"
    assert _checkpoints(tmp_path / "new") == ["step-000000005.pt"]


def test_a_checkpoint_holds_only_tensors_and_reads_back_whole(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    """What torch 1.13's safe loader (the local real-pod image's) can read: no pickled float.
    The optimizer's state keeps its integer keys, which its load_state_dict matches on."""
    import torch

    state = {
        "step": 7,
        "loss_sum": 0.25,
        "epoch_losses": [1.5, float("inf")],
        "optimizer": {"state": {0: {"momentum_buffer": torch.ones(2)}}, "param_groups": []},
        "rng": torch.get_rng_state(),
    }
    path = trainer.checkpoints.save_checkpoint(tmp_path, 7, state)
    packed = torch.load(path, weights_only=True)
    assert all(isinstance(value, torch.Tensor) for value in packed.values())
    read = trainer.checkpoints.read_checkpoint(path)
    assert read["step"] == 7 and read["loss_sum"] == 0.25
    assert read["epoch_losses"] == [1.5, float("inf")]
    assert list(read["optimizer"]["state"]) == [0]
    assert torch.equal(read["optimizer"]["state"][0]["momentum_buffer"], torch.ones(2))
    assert torch.equal(read["rng"], state["rng"])


def test_pruning_keeps_the_newest_complete_checkpoints_and_leaves_saves_in_progress(
    tmp_path: Path, trainer: SimpleNamespace
) -> None:
    assert trainer.checkpoints.prune_checkpoints(tmp_path / "absent", 2) == []
    for step in (5, 40, 300, 7):
        (tmp_path / CHECKPOINT_FILE.format(step)).write_bytes(b"")
    (tmp_path / ".step-000000400.pt.9.tmp").write_bytes(b"")  # another save, in progress
    (tmp_path / "notes.txt").write_bytes(b"")  # not the trainer's
    deleted = trainer.checkpoints.prune_checkpoints(tmp_path, 2)
    assert deleted == [tmp_path / CHECKPOINT_FILE.format(s) for s in (5, 7)]
    assert _checkpoints(tmp_path) == [
        ".step-000000400.pt.9.tmp",
        "notes.txt",
        CHECKPOINT_FILE.format(40),
        CHECKPOINT_FILE.format(300),
    ]
    assert trainer.checkpoints.checkpoint_plan({}).keep == 3
    assert trainer.checkpoints.checkpoint_plan({"AVW_CHECKPOINT_KEEP": "1"}).keep == 1


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"AVW_CHECKPOINT_EVERY": "0"}, "AVW_CHECKPOINT_EVERY='0' is not a positive number"),
        ({"AVW_CHECKPOINT_KEEP": "0"}, "AVW_CHECKPOINT_KEEP='0' is not a positive number"),
        ({"AVW_CHECKPOINT_EVERY": "ten"}, "AVW_CHECKPOINT_EVERY='ten' is not a positive number"),
        ({"AVW_RESUME_FROM": "latest"}, "AVW_RESUME_FROM=latest needs AVW_CHECKPOINT_DIR"),
        (
            {"AVW_CHECKPOINT_ARTIFACT": "checkpoint-r1", "WANDB_MODE": "online"},
            "AVW_CHECKPOINT_ARTIFACT=checkpoint-r1 needs AVW_CHECKPOINT_DIR",
        ),
    ],
)
def test_checkpoint_env_that_cannot_work_is_refused(
    trainer: SimpleNamespace, env: dict[str, str], message: str
) -> None:
    with pytest.raises(SystemExit, match=message):
        trainer.checkpoints.checkpoint_plan(env)

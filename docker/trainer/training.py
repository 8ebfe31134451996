"""The example trainer's loop: train, evaluate each epoch, log, save, and stop when told.

Rank 0 logs the metrics (already averaged over the ranks) and saves the checkpoints; a
SIGTERM ends every rank after the same whole step, saved first (``stopping.py``).
"""

from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import asdict
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from checkpoints import RESUME_LATEST, CheckpointPlan, Progress, prune_checkpoints, save_checkpoint
from hyperparameters import HyperParams
from model import build_model, epoch_order, evaluate, global_batch_share, make_data, shard
from process_group import DistInfo, say, sum_over_ranks
from resume import load_checkpoint, resume_checkpoint
from stopping import STOP, handling_wandb_stop, was_stopped_from_wandb


def train(
    params: HyperParams,
    info: DistInfo,
    run: Any,
    checkpoints: CheckpointPlan | None = None,
    *,
    log_every: int = 1,
) -> dict[str, float]:
    """Train, log to ``run`` (rank 0, or every rank in shared mode) and return the summary.

    With ``checkpoints`` it resumes from the checkpoint named there and saves its own (rank
    0); a stop asked by SIGTERM ends every rank after the same step, saved first. The training
    loss is logged every ``log_every`` steps and at the last one; the evaluation every epoch.
    """
    checkpoints = checkpoints or CheckpointPlan(None, None, None)
    train_x, train_y, eval_x, eval_y = make_data(params)
    if info.elastic is None:  # a fixed world: each rank its own shard, batch_size per rank
        train_x, train_y = shard(train_x, info), shard(train_y, info)
    # Elastic: every rank holds the whole set and takes its share of each global batch, so a
    # step is the same at any world size (model.global_batch_share).
    train_x, train_y = train_x.to(info.device), train_y.to(info.device)
    eval_x, eval_y = shard(eval_x, info).to(info.device), shard(eval_y, info).to(info.device)
    trained = build_model(params, info)  # what a checkpoint holds: not the DDP wrapper
    optimizer = torch.optim.SGD(trained.parameters(), lr=params.lr, momentum=0.9)
    progress = Progress()
    resume_from = resume_checkpoint(checkpoints, info, run)
    if resume_from is not None:
        progress = load_checkpoint(resume_from[0], params, trained, optimizer)
        say(
            info,
            f"resumed from step {progress.step} (checkpoint {resume_from[1]}) "
            f"after {progress.trained_seconds:.1f} s of training",
        )
    elif checkpoints.resume_from == RESUME_LATEST:
        artifact = f" or W&B artifact {checkpoints.artifact}" if checkpoints.artifact else ""
        say(info, f"no checkpoint in {checkpoints.directory}{artifact} yet: starting from step 0")
    trained_before = progress.trained_seconds  # by the tries before this one
    model = trained
    if info.distributed:
        device_ids = [info.device.index] if info.device.type == "cuda" else None
        model = DistributedDataParallel(trained, device_ids=device_ids)
    loss_fn = nn.CrossEntropyLoss()
    summed_loss = nn.CrossEntropyLoss(reduction="sum")
    # Only rank 0 writes metrics (the values are already averaged over ranks) and checkpoints.
    logger = run if info.rank == 0 else None

    def save() -> None:
        if info.rank == 0 and checkpoints.directory is not None:
            progress.trained_seconds = trained_before + (time.monotonic() - started)
            state = {
                **asdict(progress),
                "model": trained.state_dict(),
                "optimizer": optimizer.state_dict(),
                "rng": torch.get_rng_state(),
                "hyper_params": asdict(params),
            }
            path = save_checkpoint(checkpoints.directory, progress.step, state)
            logged = ""
            if checkpoints.artifact:
                import checkpoint_artifact  # beside this file in the image

                name = checkpoint_artifact.log_checkpoint(
                    run, checkpoints.artifact, path, progress.step, progress.trained_seconds
                )
                logged = f" (W&B artifact {name})"
            pruned = prune_checkpoints(checkpoints.directory, checkpoints.keep)
            gone = f" (deleted {len(pruned)} older: keeping {checkpoints.keep})" if pruned else ""
            say(info, f"saved checkpoint {path}{logged}{gone}")

    def end_epoch(epoch: int) -> tuple[float, float]:
        progress.epoch_losses.append(progress.loss_sum / steps_per_epoch)
        progress.loss_sum = 0.0
        eval_loss, eval_acc = evaluate(model, eval_x, eval_y, info)
        metrics = {"train/epoch_loss": progress.epoch_losses[-1], "eval/loss": eval_loss}
        if logger is not None:
            logger.log(
                {"train/step": progress.step, "epoch": epoch, **metrics, "eval/accuracy": eval_acc}
            )
        shown = " ".join(f"{k}={v:.4f}" for k, v in {**metrics, "eval/accuracy": eval_acc}.items())
        say(info, f"epoch {epoch}/{params.epochs}: {shown}")
        report_progress(info, progress.step, total_steps, epoch, params.epochs, metrics)
        return eval_loss, eval_acc

    steps_per_epoch = math.ceil(train_x.shape[0] / params.batch_size)
    total_steps = steps_per_epoch * params.epochs
    save_every = checkpoints.every or steps_per_epoch
    if logger is not None:  # the progress contract's totals (docs/trainer.md)
        logger.summary.update({"train/total_steps": total_steps, "train/epochs": params.epochs})
        if info.elastic is not None:  # each world's size, from the step it resumed at
            logger.log(
                {
                    "train/step": progress.step,
                    "elastic/world_size": info.world_size,
                    "elastic/restarts": info.restarts,
                }
            )
    if info.elastic is not None:  # the step this world resumed at, in the master's log too
        report_progress(
            info, progress.step, total_steps, progress.step // steps_per_epoch, params.epochs
        )
    eval_loss, eval_acc = evaluate(model, eval_x, eval_y, info)
    say(info, f"at step {progress.step}: eval/loss={eval_loss:.4f} eval/accuracy={eval_acc:.4f}")
    started = time.monotonic()
    order, order_epoch = None, 0
    STOP.defer = True  # from here a SIGTERM ends training after a whole step (and a save)
    try:
        while progress.step < total_steps:
            epoch, batch = divmod(progress.step, steps_per_epoch)
            epoch += 1
            if order is None or order_epoch != epoch:
                order, order_epoch = epoch_order(params, epoch, train_x.shape[0], info), epoch
            optimizer.zero_grad(set_to_none=True)
            if info.elastic is None:
                idx = order[batch * params.batch_size : (batch + 1) * params.batch_size]
                loss = loss_fn(model(train_x[idx]), train_y[idx])
            else:
                idx, whole = global_batch_share(order, batch, params.batch_size, info)
                # DDP averages the gradients over the ranks: scaled so, they are the global
                # batch's mean whatever each rank's share (and the loss too, once averaged).
                loss = summed_loss(model(train_x[idx]), train_y[idx]) * info.world_size / whole
            loss.backward()
            optimizer.step()
            progress.step += 1
            # One all-reduce averages the loss and tells every rank whether one was told to stop.
            asked = torch.tensor([loss.item(), 1.0 if STOP.signal else 0.0], device=info.device)
            totals = sum_over_ranks(asked, info)
            global_loss, stopping = totals[0].item() / info.world_size, totals[1].item() > 0
            progress.loss_sum += global_loss
            if logger is not None and (
                progress.step % log_every == 0 or progress.step == total_steps
            ):
                logger.log({"train/step": progress.step, "train/loss": global_loss, "epoch": epoch})
            if batch == steps_per_epoch - 1:
                eval_loss, eval_acc = end_epoch(epoch)
            if stopping or progress.step % save_every == 0 or progress.step == total_steps:
                save()
            if stopping:
                say(info, f"stopping after step {progress.step}: asked to stop (SIGTERM)")
                raise SystemExit(128 + (STOP.signal or signal.SIGTERM))
            if was_stopped_from_wandb():  # its interrupt may land where a library catches it
                handling_wandb_stop()
                raise KeyboardInterrupt
    finally:
        STOP.defer = False

    summary = {
        "eval/accuracy": eval_acc,
        "eval/loss": eval_loss,
        "train/first_epoch_loss": progress.epoch_losses[0],
        "train/final_epoch_loss": progress.epoch_losses[-1],
        "train/steps": float(progress.step),
        "train/seconds": time.monotonic() - started,
    }
    if logger is not None:
        logger.summary.update(summary)
    return summary


def report_progress(
    info: DistInfo,
    step: int,
    total_steps: int,
    epoch: int,
    epochs: int,
    metrics: dict[str, float] | None = None,
) -> None:
    """The progress contract's log record (docs/trainer.md), one line of rank 0's log: how far
    a run without W&B has got, for whoever reads the master's log, with the epoch's losses
    (``metrics``, under their W&B names): the Training tab's chart when there is no W&B run."""
    if info.rank == 0:
        record: dict[str, float] = {
            "step": step,
            "total_steps": total_steps,
            "epoch": epoch,
            "epochs": epochs,
        }
        record.update(metrics or {})
        if info.elastic is not None:  # this world's size: the wait's line shows a re-formation
            record["world_size"] = info.world_size
        print("AVW_PROGRESS " + json.dumps(record), flush=True)

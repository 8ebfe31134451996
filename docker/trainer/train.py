"""Example trainer for airflow-volcano-wandb: a small MLP on random data, trained with DDP.

This is the seed tutorial's example job (W&B Launch on Volcano), made to read the env the
provider's operator and Volcano's ``pytorch`` plugin put into every container. This file is
the entry point (``python train.py``, which ``launch.py`` runs); each concern is a module
beside it, all copied into the image's ``/app``:

* ``hyperparameters.py``: the command line, every hyper-parameter from a flag or ``TRAIN_*``;
* ``process_group.py``: rank, world size, device, and joining the process group (gloo on CPU,
  nccl with CUDA); without ``WORLD_SIZE`` > 1 it trains as a single process;
* ``wandb_run.py``: which ranks start the W&B run (``AVW_WANDB_RANK_MODE``), with the
  operator's identity env and the Airflow task in its config;
* ``model.py``: the MLP and its random, learnable data; ``training.py``: the loop;
* ``checkpoints.py`` and ``resume.py``: the checkpoint contract (``AVW_CHECKPOINT_*``,
  ``AVW_RESUME_FROM``; docs/trainer.md, "Checkpoints"), and ``checkpoint_artifact.py`` its W&B
  artifact for pods without a shared volume;
* ``stopping.py``: a SIGTERM ends training after a whole step, saved first; a stop from the
  W&B UI or API exits with its own code.

The image installs only torch and wandb, so no module here imports the provider package. The
W&B API key (``WANDB_API_KEY``, from a Secret) is read by the wandb SDK only; the trainer never
reads, logs or prints it. Docs: ``docs/trainer.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from collections.abc import Sequence

import torch
import torch.distributed as dist

from checkpoints import checkpoint_plan
from hyperparameters import hyper_params, parse_args
from process_group import dist_info, join_process_group, say
from stopping import (
    STOPPED_FROM_WANDB_EXIT_CODE,
    STOPPED_FROM_WANDB_MARKER,
    handle_sigterm,
    handling_wandb_stop,
    leave_termination_message,
    was_stopped_from_wandb,
)
from training import train
from wandb_run import params_from_run_config, printable_env, start_wandb, wandb_plan


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: set up the process group and W&B, train, tear down; return exit code."""
    handle_sigterm()
    environ = dict(os.environ)
    args = parse_args(argv, environ, __doc__.split("\n", 1)[0])
    params = hyper_params(args)
    info = dist_info(environ, args.backend)
    plan = wandb_plan(environ, info.rank)
    checkpoints = checkpoint_plan(environ, info.rank)

    if info.device.type == "cuda":
        # Before init_process_group, so nccl binds each rank to its own GPU, not all to GPU 0.
        torch.cuda.set_device(info.device)
    if info.distributed:
        say(
            info,
            f"joining {info.backend} process group at "
            f"{environ.get('MASTER_ADDR')}:{environ.get('MASTER_PORT')}",
        )
        join_process_group(info, environ, dt.timedelta(seconds=args.dist_timeout))
    if info.elastic is not None and info.rank == 0:
        # torchrun starts this process again at every re-formation: one line per world.
        low, high = info.elastic
        pods = info.world_size // max(info.local_world_size, 1)
        say(
            info,
            f"elastic world {info.restarts}: {pods} pod{'s' if pods != 1 else ''} (the master "
            f"and {pods - 1} of {low}..{high} workers), global batch unchanged",
        )
    # Every rank shows the W&B env it was given (allow-listed names only), so a pod log
    # proves what each rank saw, not only what rank 0 saw.
    say(info, f"W&B env: {json.dumps(printable_env(environ), sort_keys=True)}")
    if info.rank == 0 and plan.note:
        say(info, plan.note)
    say(info, f"device={info.device} wandb={'on' if plan.init else 'off'}")

    run = None
    exit_code = 1
    try:
        run = start_wandb(plan, info, params, environ)
        params = params_from_run_config(run, params, info)
        summary = train(params, info, run, checkpoints, log_every=args.log_every)
        exit_code = 0
        if info.rank == 0:
            # One machine-readable line for pod logs and tests; metrics only, no env.
            print("AVW_TRAIN_RESULT " + json.dumps(summary, sort_keys=True), flush=True)
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else 1
        raise
    except KeyboardInterrupt:
        if not was_stopped_from_wandb():
            raise
        handling_wandb_stop()
        exit_code = STOPPED_FROM_WANDB_EXIT_CODE
        url = getattr(run, "url", None) or environ.get("WANDB_RUN_ID") or "the run"
        leave_termination_message(environ, f"{STOPPED_FROM_WANDB_MARKER}: {url}")
        say(
            info,
            f"the W&B run was stopped from the W&B UI or API ({url}): exiting with code "
            f"{exit_code}",
        )
    finally:
        if run is not None:
            run.finish(exit_code=exit_code)
        if info.distributed and dist.is_initialized():
            dist.destroy_process_group()
    return exit_code


if __name__ == "__main__":
    sys.exit(main())

"""Example trainer for airflow-volcano-wandb: a small MLP on random data, trained with DDP.

This is the seed tutorial's example job (W&B Launch on Volcano), made to read the env the
provider's operator and Volcano's ``pytorch`` plugin put into every container:

* ``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` (set by the pytorch plugin, one
  process per pod; or by ``torchrun``, one per GPU, which ``launch.py`` starts when the pod has
  several) drive ``torch.distributed.init_process_group``; gloo on CPU, nccl when CUDA is
  available, each process on the GPU its ``LOCAL_RANK`` names. Without ``WORLD_SIZE`` > 1 it
  trains as a single process.
* ``WANDB_*`` and ``AVW_WANDB_RANK_MODE`` decide which ranks talk to W&B (see
  :func:`wandb_plan`), and the ``AIRFLOW_CTX_*`` / ``AVW_AIRFLOW_TASK_URL`` env becomes the
  ``airflow`` dict of the run config, so the W&B run names the Airflow task that started it.

The data is random but labelled by a fixed random linear "teacher", so the task is learnable
and ``eval/accuracy`` on a held-out set (same teacher, different inputs) means something:
chance is ``1 / classes``, a trained model gets well above it.

The image installs only torch and wandb, so this file must not import the provider package;
``AIRFLOW_ENV_TO_CONFIG`` mirrors ``airflow_volcano_wandb.wandb.wandb_env.airflow_config_from_env``
and a test keeps the two in sync. Docs: ``docs/trainer.md``.

The W&B API key (``WANDB_API_KEY``, from a Secret) is read by the wandb SDK only; this file
never reads, logs or prints it, and prints env values only from an allow-list.
"""

from __future__ import annotations

import _thread
import argparse
import contextlib
import datetime as dt
import json
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

# Env name -> key in the run config's ``airflow`` dict. Mirrors the provider's
# airflow_config_from_env (tests/trainer checks they agree).
AIRFLOW_ENV_TO_CONFIG: dict[str, str] = {
    "AIRFLOW_CTX_DAG_ID": "dag_id",
    "AIRFLOW_CTX_DAG_RUN_ID": "run_id",
    "AIRFLOW_CTX_TASK_ID": "task_id",
    "AIRFLOW_CTX_TRY_NUMBER": "try_number",
    "AIRFLOW_CTX_MAP_INDEX": "map_index",
    "AIRFLOW_CTX_LOGICAL_DATE": "logical_date",
    "AVW_AIRFLOW_TASK_URL": "task_url",
}
_INT_CONFIG_KEYS = {"try_number", "map_index"}

RANK_MODE_ENV = "AVW_WANDB_RANK_MODE"
RANK_MODES = ("master", "shared")
# WANDB_MODE values under which nothing reaches a W&B server; shared mode needs one.
_LOCAL_WANDB_MODES = {"offline", "dryrun", "disabled"}

#: The exit code of a rank whose W&B run was stopped from the W&B UI or API (docs/trainer.md).
#: The provider raises ``StoppedFromWandbError`` for it; the value must stay equal to
#: ``airflow_volcano_wandb.wait.wandb_stop.STOPPED_FROM_WANDB_EXIT_CODE`` (tests/trainer checks
#: it). It is none of Python's (1, 2), the shell's (126-128), a signal's (128+N) or the
#: sysexits range (64-78), so no other ending of the trainer can be mistaken for a stop.
STOPPED_FROM_WANDB_EXIT_CODE = 86
#: Written to the container's termination message as well (the kubelet copies the file into
#: ``state.terminated.message``): under ``torchrun`` (a pod with several GPUs) the container
#: exits with ``torchrun``'s code, not the trainer's, and the marker still says why. Kept
#: equal to ``airflow_volcano_wandb.wait.wandb_stop.STOPPED_FROM_WANDB_MARKER``.
STOPPED_FROM_WANDB_MARKER = "avw-stopped-from-wandb"
#: Where the kubelet reads the termination message (a pod's ``terminationMessagePath``).
TERMINATION_LOG_ENV = "AVW_TERMINATION_LOG"
DEFAULT_TERMINATION_LOG = "/dev/termination-log"

# Only these env names are ever echoed to the log; WANDB_API_KEY is deliberately absent.
_PRINTABLE_ENV = (
    "WANDB_PROJECT",
    "WANDB_ENTITY",
    "WANDB_RUN_ID",
    "WANDB_NAME",
    "WANDB_RUN_GROUP",
    "WANDB_JOB_TYPE",
    "WANDB_MODE",
    "WANDB_BASE_URL",
    RANK_MODE_ENV,
)


@dataclass(frozen=True)
class HyperParams:
    """Training knobs; each has a CLI flag and a ``TRAIN_*`` env fallback (flag wins)."""

    epochs: int = 5
    batch_size: int = 64
    hidden_size: int = 64
    lr: float = 0.05
    train_samples: int = 4096
    eval_samples: int = 1024
    features: int = 16
    classes: int = 4
    seed: int = 0


@dataclass(frozen=True)
class DistInfo:
    """Where this process sits in the job, from the pytorch plugin's env."""

    rank: int
    world_size: int
    """Processes in the job: pods, or pods times ``torchrun``'s processes per pod."""
    local_rank: int
    backend: str | None
    """``None`` when running as a single process (no process group)."""
    device: torch.device
    local_world_size: int = 1
    """Processes in this pod (``torchrun``'s ``LOCAL_WORLD_SIZE``)."""

    @property
    def distributed(self) -> bool:
        return self.backend is not None


@dataclass(frozen=True)
class WandbPlan:
    """Whether this rank calls ``wandb.init`` and with which mode settings."""

    init: bool
    shared: bool
    note: str | None = None
    """Why the requested rank mode was adjusted, printed once by rank 0."""


def parse_args(argv: Sequence[str] | None, environ: Mapping[str, str]) -> argparse.Namespace:
    """Parse CLI flags; defaults come from ``TRAIN_<FLAG>`` env, then :class:`HyperParams`."""
    defaults = HyperParams()
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    for field_name, value in asdict(defaults).items():
        env_name = "TRAIN_" + field_name.upper()
        kind = type(value)
        raw = environ.get(env_name)
        default = value
        if raw not in (None, ""):
            try:
                default = kind(raw)
            except ValueError:
                parser.error(f"{env_name}={raw!r} is not a valid {kind.__name__}")
        parser.add_argument(
            "--" + field_name.replace("_", "-"),
            type=kind,
            default=default,
            help=f"default {value}, env {env_name}",
        )
    parser.add_argument(
        "--backend",
        choices=("auto", "gloo", "nccl"),
        default=environ.get("TRAIN_BACKEND") or "auto",
        help="torch.distributed backend; auto = nccl with CUDA, else gloo (env TRAIN_BACKEND)",
    )
    parser.add_argument(
        "--dist-timeout",
        type=float,
        default=float(environ.get("TRAIN_DIST_TIMEOUT") or 600),
        help="seconds to wait for all ranks to join (env TRAIN_DIST_TIMEOUT); worker pods "
        "can start well before the master pod's address resolves",
    )
    args = parser.parse_args(argv)
    for name in ("epochs", "batch_size", "hidden_size", "train_samples", "eval_samples"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.classes < 2 or args.features < 1:
        parser.error("--classes must be >= 2 and --features >= 1")
    return args


def hyper_params(args: argparse.Namespace) -> HyperParams:
    """Collect the hyper-parameters from parsed args (they go into the W&B config)."""
    return HyperParams(**{name: getattr(args, name) for name in asdict(HyperParams())})


def airflow_config(environ: Mapping[str, str]) -> dict[str, Any]:
    """Build the run config's ``airflow`` dict from the Airflow context env (absent = left out)."""
    config: dict[str, Any] = {}
    for env_name, key in AIRFLOW_ENV_TO_CONFIG.items():
        value = environ.get(env_name)
        if value is None or value == "":
            continue
        if key in _INT_CONFIG_KEYS:
            try:
                config[key] = int(value)
            except ValueError:
                config[key] = value
        else:
            config[key] = value
    return config


def dist_info(environ: Mapping[str, str], backend: str) -> DistInfo:
    """Read rank and world size; pick the backend and device."""
    world_size = int(environ.get("WORLD_SIZE") or 1)
    rank = int(environ.get("RANK") or 0)
    # torchrun sets LOCAL_RANK (this process's GPU in the pod); the plugin alone runs one
    # process per pod and sets none, so 0 is right there.
    local_rank = int(environ.get("LOCAL_RANK") or 0)
    if not 0 <= rank < max(world_size, 1):
        raise SystemExit(f"RANK={rank} is outside WORLD_SIZE={world_size}")
    cuda = torch.cuda.is_available()
    if backend == "auto":
        backend = "nccl" if cuda else "gloo"
    device = torch.device("cuda", local_rank % torch.cuda.device_count()) if cuda else None
    return DistInfo(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        backend=backend if world_size > 1 else None,
        device=device or torch.device("cpu"),
        local_world_size=int(environ.get("LOCAL_WORLD_SIZE") or 1),
    )


def join_process_group(info: DistInfo, environ: Mapping[str, str], timeout: dt.timedelta) -> None:
    """Join the process group, once every rank is known to use the same backend.

    Ranks that disagree (a CPU-only master picks gloo while GPU workers pick nccl) would wait
    on each other until ``timeout``; instead each rank publishes its backend in the
    rendezvous store, reads every other's, and exits with a message naming them.
    """
    addr, port = environ["MASTER_ADDR"], int(environ["MASTER_PORT"])
    # Under torchrun its agent already serves the store at MASTER_ADDR:MASTER_PORT.
    agent_store = environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    hosts_store = info.rank == 0 and not agent_store
    store: Any = dist.TCPStore(addr, port, info.world_size, is_master=hosts_store, timeout=timeout)
    store = dist.PrefixStore(f"avw/{environ.get('TORCHELASTIC_RESTART_COUNT') or 0}", store)
    assert info.backend is not None
    store.set(f"backend/{info.rank}", info.backend)
    backends = {r: store.get(f"backend/{r}").decode() for r in range(info.world_size)}
    # The store dies with the rank that hosts it: if that rank exits on a disagreement before
    # the others have read every backend, they see a closed connection instead of the reason.
    if hosts_store:
        store.wait([f"read/{r}" for r in range(1, info.world_size)])
    else:
        store.set(f"read/{info.rank}", "1")
    if len(set(backends.values())) > 1:
        ranks = ", ".join(f"rank {r}: {b}" for r, b in backends.items())
        raise SystemExit(
            f"ranks disagree on the torch.distributed backend ({ranks}); DDP would hang. "
            "Give every rank the same devices (the master's GPU limit too), or set "
            "TRAIN_BACKEND on all of them"
        )
    if info.backend == "nccl" and info.device.type != "cuda":
        raise SystemExit("backend nccl needs CUDA, and torch sees no GPU here")
    dist.init_process_group(
        backend=info.backend,
        store=store,
        rank=info.rank,
        world_size=info.world_size,
        timeout=timeout,
    )


def wandb_plan(environ: Mapping[str, str], rank: int) -> WandbPlan:
    """Decide whether this rank starts W&B, following ``AVW_WANDB_RANK_MODE``.

    ``master`` (default): only global rank 0 calls ``wandb.init``; one run per job.
    ``shared``: every rank calls ``wandb.init`` on the same run id in W&B's shared mode
    (rank 0 primary). Shared mode is server-side multi-writer, so under a local
    ``WANDB_MODE`` (offline, dryrun, disabled) it falls back to ``master``: N offline
    writers would leave N conflicting local copies of one run id.
    """
    requested = (environ.get(RANK_MODE_ENV) or "master").strip().lower()
    if requested not in RANK_MODES:
        raise SystemExit(f"{RANK_MODE_ENV} must be one of {', '.join(RANK_MODES)}")
    mode = (environ.get("WANDB_MODE") or "").strip().lower()
    if requested == "shared" and mode in _LOCAL_WANDB_MODES:
        return WandbPlan(
            init=rank == 0,
            shared=False,
            note=f"{RANK_MODE_ENV}=shared needs W&B online; WANDB_MODE={mode}, so only rank 0 "
            "writes the run (master rank mode)",
        )
    if requested == "shared":
        return WandbPlan(init=True, shared=True)
    return WandbPlan(init=rank == 0, shared=False)


def _env_list(value: str | None) -> list[str] | None:
    items = [item.strip() for item in (value or "").split(",") if item.strip()]
    return items or None


def start_wandb(
    plan: WandbPlan,
    info: DistInfo,
    params: HyperParams,
    environ: Mapping[str, str],
) -> Any:
    """Call ``wandb.init`` as the plan says; return the run, or ``None`` for a silent rank.

    Identity comes from the operator's env, passed explicitly so the contract is visible
    here rather than implied by the SDK's env handling.
    """
    if not plan.init:
        return None
    # Imported here so silent ranks never load the SDK at all.
    import wandb

    config: dict[str, Any] = {
        **asdict(params),
        "world_size": info.world_size,
        "processes_per_pod": info.local_world_size,
        "backend": info.backend or "none",
        "device": info.device.type,
        "rank_mode": "shared" if plan.shared else "master",
        "airflow": airflow_config(environ),
    }
    kwargs: dict[str, Any] = {
        "project": environ.get("WANDB_PROJECT") or None,
        "entity": environ.get("WANDB_ENTITY") or None,
        "id": environ.get("WANDB_RUN_ID") or None,
        "name": environ.get("WANDB_NAME") or None,
        "group": environ.get("WANDB_RUN_GROUP") or None,
        "job_type": environ.get("WANDB_JOB_TYPE") or None,
        "tags": _env_list(environ.get("WANDB_TAGS")),
        "resume": "allow",
    }
    # The SDK asks the server every 15 s whether the run was stopped (online runs only) and
    # calls stop_fn when it was: see stop_from_wandb.
    settings: dict[str, Any] = {"stop_fn": stop_from_wandb}
    if plan.shared:
        primary = info.rank == 0
        settings.update(
            mode="shared",
            x_primary=primary,
            x_label=f"rank-{info.rank}",
            # Only the primary may mark the run finished, else the first worker to exit
            # would end the run while the others still log.
            x_update_finish_state=primary,
        )
        if primary:
            kwargs["config"] = config
    else:
        kwargs["config"] = config
    kwargs["settings"] = wandb.Settings(**settings)
    run = wandb.init(**kwargs)
    # Log against our own step counter: shared mode ignores wandb.log(step=...).
    run.define_metric("train/step")
    run.define_metric("train/*", step_metric="train/step")
    run.define_metric("epoch")
    run.define_metric("eval/*", step_metric="epoch")
    return run


def make_data(params: HyperParams) -> tuple[torch.Tensor, ...]:
    """Random inputs labelled by a random linear teacher: learnable, so accuracy is meaningful.

    Every rank builds the same tensors from the seed, so no rank has to ship data to another.
    """
    gen = torch.Generator().manual_seed(params.seed)
    teacher = torch.randn(params.features, params.classes, generator=gen)
    train_x = torch.randn(params.train_samples, params.features, generator=gen)
    eval_x = torch.randn(params.eval_samples, params.features, generator=gen)
    return train_x, (train_x @ teacher).argmax(1), eval_x, (eval_x @ teacher).argmax(1)


def shard(tensor: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Return this rank's equal-sized slice, dropping the remainder.

    Equal sizes matter: DDP all-reduces gradients every step, so a rank with one batch more
    than the others would wait forever for partners.
    """
    per_rank = tensor.shape[0] // info.world_size
    if per_rank == 0:
        raise SystemExit(f"{tensor.shape[0]} samples cannot be split over {info.world_size} ranks")
    return tensor[info.rank * per_rank : (info.rank + 1) * per_rank]


def mean_over_ranks(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Average a tensor over all ranks (identity without a process group)."""
    if info.distributed:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
        values /= info.world_size
    return values


def evaluate(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, info: DistInfo
) -> tuple[float, float]:
    """Return (loss, accuracy) on this rank's shard of the eval set, combined over ranks."""
    model.eval()
    with torch.no_grad():
        logits = model(x)
        loss = nn.functional.cross_entropy(logits, y, reduction="sum")
        correct = (logits.argmax(1) == y).sum()
    model.train()
    totals = torch.tensor([loss.item(), correct.item(), y.shape[0]], dtype=torch.float64)
    if info.distributed:
        dist.all_reduce(totals, op=dist.ReduceOp.SUM)
    return totals[0].item() / totals[2].item(), totals[1].item() / totals[2].item()


def say(info: DistInfo, message: str) -> None:
    """Print one log line tagged with the rank (pod logs of all ranks end up side by side)."""
    print(f"[rank {info.rank}/{info.world_size}] {message}", flush=True)


def train(params: HyperParams, info: DistInfo, run: Any) -> dict[str, float]:
    """Train, log to ``run`` (rank 0, or every rank in shared mode) and return the summary."""
    torch.manual_seed(params.seed)  # same initial weights on every rank, as DDP expects
    train_x, train_y, eval_x, eval_y = make_data(params)
    train_x, train_y = shard(train_x, info).to(info.device), shard(train_y, info).to(info.device)
    eval_x, eval_y = shard(eval_x, info).to(info.device), shard(eval_y, info).to(info.device)

    model: nn.Module = nn.Sequential(
        nn.Linear(params.features, params.hidden_size),
        nn.ReLU(),
        nn.Linear(params.hidden_size, params.hidden_size),
        nn.ReLU(),
        nn.Linear(params.hidden_size, params.classes),
    ).to(info.device)
    if info.distributed:
        device_ids = [info.device.index] if info.device.type == "cuda" else None
        model = DistributedDataParallel(model, device_ids=device_ids)
    optimizer = torch.optim.SGD(model.parameters(), lr=params.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    # Only rank 0 writes metrics: the values are already averaged over ranks.
    logger = run if info.rank == 0 else None

    steps_per_epoch = math.ceil(train_x.shape[0] / params.batch_size)
    step = 0
    epoch_losses: list[float] = []
    eval_loss, eval_acc = evaluate(model, eval_x, eval_y, info)
    say(info, f"before training: eval/loss={eval_loss:.4f} eval/accuracy={eval_acc:.4f}")
    started = time.monotonic()
    for epoch in range(1, params.epochs + 1):
        # Per-rank order, seeded so a re-run reproduces the same batches.
        order = torch.randperm(
            train_x.shape[0], generator=torch.Generator().manual_seed(params.seed * 1000 + epoch)
        ).to(info.device)
        loss_sum = 0.0
        for batch in range(steps_per_epoch):
            idx = order[batch * params.batch_size : (batch + 1) * params.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            step += 1
            global_loss = mean_over_ranks(loss.detach().reshape(1), info).item()
            loss_sum += global_loss
            if logger is not None:
                logger.log({"train/step": step, "train/loss": global_loss, "epoch": epoch})
        epoch_losses.append(loss_sum / steps_per_epoch)
        eval_loss, eval_acc = evaluate(model, eval_x, eval_y, info)
        if logger is not None:
            logger.log(
                {
                    "train/step": step,
                    "epoch": epoch,
                    "train/epoch_loss": epoch_losses[-1],
                    "eval/loss": eval_loss,
                    "eval/accuracy": eval_acc,
                }
            )
        say(
            info,
            f"epoch {epoch}/{params.epochs}: train/epoch_loss={epoch_losses[-1]:.4f} "
            f"eval/loss={eval_loss:.4f} eval/accuracy={eval_acc:.4f}",
        )

    summary = {
        "eval/accuracy": eval_acc,
        "eval/loss": eval_loss,
        "train/first_epoch_loss": epoch_losses[0],
        "train/final_epoch_loss": epoch_losses[-1],
        "train/steps": float(step),
        "train/seconds": time.monotonic() - started,
    }
    if logger is not None:
        logger.summary.update(summary)
    return summary


# Set by stop_from_wandb: the KeyboardInterrupt that follows is W&B's stop, not a Ctrl-C.
_STOPPED_FROM_WANDB = threading.Event()


def stop_from_wandb() -> None:
    """The W&B SDK's ``stop_fn``: the run was stopped from the W&B UI or API.

    Called on the SDK's own thread. It records the stop and interrupts the main thread (as the
    SDK's default does), so :func:`main` finishes the W&B run and exits with
    :data:`STOPPED_FROM_WANDB_EXIT_CODE`, which the provider tells from any other failure.
    """
    _STOPPED_FROM_WANDB.set()
    _thread.interrupt_main()


def _leave_termination_message(environ: Mapping[str, str], message: str) -> None:
    """Write the container's termination message, where there is one to write: the kubelet
    mounts ``/dev/termination-log`` in a pod; a trainer run by hand has none (and is never
    to create one on its machine)."""
    path = Path(environ.get(TERMINATION_LOG_ENV) or DEFAULT_TERMINATION_LOG)
    if TERMINATION_LOG_ENV not in environ and not path.exists():
        return
    with contextlib.suppress(OSError):
        path.write_text(message + "\n")


def _terminate(signum: int, _frame: Any) -> None:
    # Volcano aborts a job by deleting its pods (SIGTERM); turning that into SystemExit lets
    # the finally block finish the W&B run with an exit code instead of leaving it "running".
    raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: set up the process group and W&B, train, tear down; return exit code."""
    signal.signal(signal.SIGTERM, _terminate)
    environ = dict(os.environ)
    args = parse_args(argv, environ)
    params = hyper_params(args)
    info = dist_info(environ, args.backend)
    plan = wandb_plan(environ, info.rank)

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
    # Every rank shows the W&B env it was given (allow-listed names only), so a pod log
    # proves what each rank saw, not only what rank 0 saw.
    shown = {name: environ[name] for name in _PRINTABLE_ENV if environ.get(name)}
    say(info, f"W&B env: {json.dumps(shown, sort_keys=True)}")
    if info.rank == 0 and plan.note:
        say(info, plan.note)
    say(info, f"device={info.device} wandb={'on' if plan.init else 'off'}")

    run = None
    exit_code = 1
    try:
        run = start_wandb(plan, info, params, environ)
        summary = train(params, info, run)
        exit_code = 0
        if info.rank == 0:
            # One machine-readable line for pod logs and tests; metrics only, no env.
            print("AVW_TRAIN_RESULT " + json.dumps(summary, sort_keys=True), flush=True)
    except SystemExit as exc:
        exit_code = exc.code if isinstance(exc.code, int) else 1
        raise
    except KeyboardInterrupt:
        if not _STOPPED_FROM_WANDB.is_set():
            raise
        exit_code = STOPPED_FROM_WANDB_EXIT_CODE
        url = getattr(run, "url", None) or environ.get("WANDB_RUN_ID") or "the run"
        _leave_termination_message(environ, f"{STOPPED_FROM_WANDB_MARKER}: {url}")
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

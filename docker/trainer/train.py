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
* ``AVW_CHECKPOINT_DIR``, ``AVW_CHECKPOINT_EVERY`` and ``AVW_RESUME_FROM`` are the checkpoint
  contract (docs/trainer.md, "Checkpoints"): rank 0 saves ``step-<N>.pt`` atomically every N
  steps and when told to stop (SIGTERM), and every rank resumes from the checkpoint named.
  With ``AVW_CHECKPOINT_ARTIFACT`` (pods without a shared volume) rank 0 also logs each save
  to that W&B artifact, resumes from it when it is newer, and sends the file to the other
  ranks (``checkpoint_artifact.py``).

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
import re
import shutil
import signal
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
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

# The checkpoint contract (docs/trainer.md, "Checkpoints"); the provider's renderer sets the
# first and the third (airflow_volcano_wandb/template/checkpoints.py).
CHECKPOINT_DIR_ENV = "AVW_CHECKPOINT_DIR"
CHECKPOINT_EVERY_ENV = "AVW_CHECKPOINT_EVERY"
CHECKPOINT_KEEP_ENV = "AVW_CHECKPOINT_KEEP"
#: Complete checkpoints kept by default: the newest, and two to fall back on should it be lost.
DEFAULT_CHECKPOINT_KEEP = 3
RESUME_FROM_ENV = "AVW_RESUME_FROM"
#: ``AVW_RESUME_FROM=latest``: the newest complete checkpoint in ``AVW_CHECKPOINT_DIR``, if any.
RESUME_LATEST = "latest"
#: A complete checkpoint's name; a save in progress has another (``.step-....tmp``).
CHECKPOINT_NAME = re.compile(r"step-([0-9]+)\.pt\Z")
#: A W&B artifact (of the run's entity and project) that keeps every checkpoint rank 0 saves,
#: for pods without a shared volume: the operator's ``checkpoint-<run id>``
#: (``checkpoint_artifact.py``).
CHECKPOINT_ARTIFACT_ENV = "AVW_CHECKPOINT_ARTIFACT"

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


@dataclass(frozen=True)
class CheckpointPlan:
    """Where checkpoints go, how often, and where training resumes from (all from env)."""

    directory: Path | None
    """``None``: no checkpoints are saved."""
    every: int | None
    """Save every this many steps (and at the last); ``None``: at the end of every epoch."""
    resume_from: str | None
    """A checkpoint's path, :data:`RESUME_LATEST`, or ``None`` to start from step 0."""
    keep: int = DEFAULT_CHECKPOINT_KEEP
    """How many complete checkpoints a save leaves (the newest ones): a volume of a long
    training would otherwise fill with one checkpoint per epoch."""
    artifact: str | None = None
    """The W&B artifact every save is logged to, and ``latest`` also looks in."""


@dataclass
class Progress:
    """What a checkpoint holds besides the model and optimizer: how far training got."""

    step: int = 0
    """Optimizer steps done; the next step logged is ``step + 1``."""
    epoch_losses: list[float] = field(default_factory=list)
    loss_sum: float = 0.0
    """Sum of the losses of the epoch in progress (its mean is logged at the epoch's end)."""
    trained_seconds: float = 0.0
    """Wall-clock seconds spent training up to ``step``, over every try that trained the run
    (a resumed trainer adds its own to what it loaded): what a resume saves doing again."""


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
        # The operator's WANDB_RESUME: "must" on a try that resumes an interrupted run.
        "resume": environ.get("WANDB_RESUME") or "allow",
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


def params_from_run_config(run: Any, params: HyperParams, info: DistInfo) -> HyperParams:
    """The hyper-parameters as ``wandb.config`` has them, the same on every rank.

    ``wandb.init`` lays a W&B Launch run config (``WANDB_LAUNCH`` with ``WANDB_CONFIG`` or its
    ``WANDB_CONFIG_<n>`` slices, the operator's ``run_config``) over the flags and ``TRAIN_*``
    values it was given, so a Launch job's hyper-parameters reach this code unchanged. Rank
    0's run decides; the ranks that start no run receive its values.
    """
    values = asdict(params)
    if run is not None:
        values.update({k: type(values[k])(run.config[k]) for k in values if k in run.config})
    if info.distributed:
        values = json.loads(broadcast_bytes(json.dumps(values).encode(), info))
    return HyperParams(**values)


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


def sum_over_ranks(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Add a tensor up over all ranks (identity without a process group)."""
    if info.distributed:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
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


def checkpoint_plan(environ: Mapping[str, str], rank: int = 0) -> CheckpointPlan:
    """Read the checkpoint contract's env; a value that cannot work exits naming it. Rank 0
    logs the checkpoints to an artifact, so it needs an online run (the others need none)."""
    directory = environ.get(CHECKPOINT_DIR_ENV) or None
    raw_every = (environ.get(CHECKPOINT_EVERY_ENV) or "").strip()
    if raw_every and not (raw_every.isdigit() and int(raw_every) > 0):
        raise SystemExit(f"{CHECKPOINT_EVERY_ENV}={raw_every!r} is not a positive number of steps")
    raw_keep = (environ.get(CHECKPOINT_KEEP_ENV) or "").strip()
    if raw_keep and not (raw_keep.isdigit() and int(raw_keep) > 0):
        raise SystemExit(f"{CHECKPOINT_KEEP_ENV}={raw_keep!r} is not a positive number")
    resume_from = (environ.get(RESUME_FROM_ENV) or "").strip() or None
    if resume_from == RESUME_LATEST and directory is None:
        raise SystemExit(f"{RESUME_FROM_ENV}={RESUME_LATEST} needs {CHECKPOINT_DIR_ENV}")
    artifact = (environ.get(CHECKPOINT_ARTIFACT_ENV) or "").strip() or None
    if artifact and directory is None:
        raise SystemExit(
            f"{CHECKPOINT_ARTIFACT_ENV}={artifact} needs {CHECKPOINT_DIR_ENV}: a checkpoint is "
            "saved there before it is logged to W&B"
        )
    mode = (environ.get("WANDB_MODE") or "").strip().lower()
    if artifact and rank == 0 and mode in _LOCAL_WANDB_MODES:
        raise SystemExit(
            f"{CHECKPOINT_ARTIFACT_ENV}={artifact} needs an online W&B run on rank 0, and "
            f"WANDB_MODE={mode} sends nothing to W&B: no checkpoint would be kept there"
        )
    return CheckpointPlan(
        directory=Path(directory) if directory else None,
        every=int(raw_every) if raw_every else None,
        resume_from=resume_from,
        keep=int(raw_keep) if raw_keep else DEFAULT_CHECKPOINT_KEEP,
        artifact=artifact,
    )


def checkpoint_path(directory: Path, step: int) -> Path:
    """Where the checkpoint of ``step`` is (zero-padded, so names sort as steps do)."""
    return directory / f"step-{step:09d}.pt"


def complete_checkpoints(directory: Path) -> list[Path]:
    """The complete checkpoints in ``directory``, oldest step first (none without the
    directory). Saves in progress never match :data:`CHECKPOINT_NAME`."""
    if not directory.is_dir():
        return []
    found = [
        (int(match[1]), path)
        for path in directory.iterdir()
        if (match := CHECKPOINT_NAME.match(path.name)) and path.is_file()
    ]
    return [path for _, path in sorted(found)]


def latest_checkpoint(directory: Path) -> Path | None:
    """The complete checkpoint of the highest step in ``directory`` (``None``: none yet)."""
    found = complete_checkpoints(directory)
    return found[-1] if found else None


def prune_checkpoints(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` complete checkpoints; returns what was deleted.

    Only after a save has completed, so the newest is never the one at risk; saves in
    progress (another rank's temporary files) are not checkpoints and are left alone.
    """
    old = complete_checkpoints(directory)[:-keep]
    for path in old:
        path.unlink(missing_ok=True)
    return old


#: A packed checkpoint's entry holding everything but its tensors, as JSON bytes.
_SKELETON = "skeleton.json"
#: How the skeleton refers to a tensor (by its entry) and writes a mapping (key types kept:
#: an optimizer's state is keyed by parameter number, which JSON would turn into text).
_TENSOR, _MAPPING = "__tensor__", "__mapping__"


def pack_checkpoint(state: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """``state`` as tensors only, so that ``torch.load(weights_only=True)`` reads it on every
    torch the trainer runs on: torch 1.13's safe unpickler (the local real-pod image's) refuses
    a pickled Python float. The tensors are entries of their own; the rest is JSON in a byte
    tensor. Anything JSON cannot hold raises (``TypeError``)."""
    tensors: dict[str, torch.Tensor] = {}

    def walk(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            entry = str(len(tensors))
            tensors[entry] = value
            return {_TENSOR: entry}
        if isinstance(value, Mapping):
            return {_MAPPING: [[walk(k), walk(v)] for k, v in value.items()]}
        if isinstance(value, list | tuple):
            return [walk(item) for item in value]
        return value

    skeleton = json.dumps(walk(dict(state))).encode()
    return {**tensors, _SKELETON: torch.tensor(list(skeleton), dtype=torch.uint8)}


def read_checkpoint(path: Path) -> dict[str, Any]:
    """A checkpoint :func:`save_checkpoint` wrote, loaded without running any pickled code."""
    packed = torch.load(path, map_location="cpu", weights_only=True)

    def build(value: Any) -> Any:
        if isinstance(value, dict) and _TENSOR in value:
            return packed[value[_TENSOR]]
        if isinstance(value, dict):
            return {build(k): build(v) for k, v in value[_MAPPING]}
        if isinstance(value, list):
            return [build(item) for item in value]
        return value

    return build(json.loads(bytes(packed[_SKELETON].tolist())))


def save_checkpoint(directory: Path, step: int, state: Mapping[str, Any]) -> Path:
    """Write ``state`` as the checkpoint of ``step``, atomically: into a temporary file in the
    same directory, flushed to disk, then renamed (a checkpoint is complete or absent)."""
    directory.mkdir(parents=True, exist_ok=True)
    final = checkpoint_path(directory, step)
    temporary = _temporary(final)
    packed = pack_checkpoint(state)  # before the file: a state that cannot be saved leaves none
    try:
        with temporary.open("wb") as out:
            torch.save(packed, out)
        _move_into_place(temporary, final)
    finally:
        temporary.unlink(missing_ok=True)
    return final


def _temporary(final: Path) -> Path:
    """A name beside ``final`` that is no checkpoint's, for this process's write of it."""
    return final.with_name(f".{final.name}.{os.getpid()}.tmp")


def _move_into_place(temporary: Path, final: Path) -> None:
    """Flush ``temporary`` to disk and rename it onto ``final`` (same directory): complete or
    absent, whenever the process dies."""
    _fsync(temporary)
    os.replace(temporary, final)
    _fsync(final.parent)  # the rename reaches the disk only with the directory's entry


def _fsync(path: Path) -> None:
    handle = os.open(path, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)


def _download_into_place(version: Any, final: Path) -> None:
    """Download an artifact version's checkpoint onto ``final`` atomically: into a directory
    beside it whose name is no checkpoint's, then moved into place."""
    import checkpoint_artifact

    staging = final.with_name(f".{final.name}.{os.getpid()}.download")
    try:
        _move_into_place(checkpoint_artifact.download(version, staging), final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def latest_on_rank_0(plan: CheckpointPlan, run: Any) -> tuple[int, str]:
    """Rank 0's ``latest``: the step of the newest complete local checkpoint (a volume, or a
    restarted container's own directory) or, when the artifact's latest version is as new or
    newer, that version's (downloaded if newer; W&B records that the run used it). Returns
    ``(step, name for the log)``, ``(-1, "")`` for no checkpoint at all."""
    assert plan.directory is not None  # checkpoint_plan refuses latest without a directory
    local = latest_checkpoint(plan.directory)
    step = int(CHECKPOINT_NAME.match(local.name)[1]) if local is not None else -1
    source = str(local) if local is not None else ""
    if not plan.artifact:
        return step, source
    # Beside this file in the image; only rank 0 of a run with the artifact needs it.
    import checkpoint_artifact

    version = checkpoint_artifact.newest_version(run, plan.artifact)
    if version is not None and int(version.metadata["step"]) >= step:
        run.use_artifact(version)
        if int(version.metadata["step"]) > step:
            step = int(version.metadata["step"])
            _download_into_place(version, checkpoint_path(plan.directory, step))
        source = checkpoint_artifact.version_name(version)
    return step, source


def broadcast_bytes(data: bytes, info: DistInfo) -> bytes:
    """Rank 0's ``data`` on every rank (the others pass ``b""``), through a byte tensor that
    shares a bytearray's memory: torch's object broadcast needs numpy, which the image lacks."""
    size = torch.tensor([len(data)], dtype=torch.int64, device=info.device)
    dist.broadcast(size, src=0)
    received = bytearray(data) if info.rank == 0 else bytearray(int(size.item()))
    if received:
        host = torch.frombuffer(received, dtype=torch.uint8)
        sent = host.to(info.device)  # the same tensor on CPU
        dist.broadcast(sent, src=0)
        host.copy_(sent)
    return bytes(received)


def share_checkpoint(path: Path, info: DistInfo) -> None:
    """Send rank 0's checkpoint to the ranks that do not have it (pods without a shared
    volume), each writing it atomically into its own directory; nothing when all have it."""
    lacking = torch.tensor([0.0 if path.is_file() else 1.0], device=info.device)
    if sum_over_ranks(lacking, info).item() == 0:
        return
    content = broadcast_bytes(path.read_bytes() if info.rank == 0 else b"", info)
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = _temporary(path)
        try:
            temporary.write_bytes(content)
            _move_into_place(temporary, path)
        finally:
            temporary.unlink(missing_ok=True)


def resume_checkpoint(
    plan: CheckpointPlan, info: DistInfo, run: Any = None
) -> tuple[Path, str] | None:
    """The checkpoint to resume from and its name for the log, the same on every rank: rank 0
    resolves ``latest`` and tells the others its step, so ranks never start from different
    steps; with an artifact it also sends the file to ranks without it."""
    if plan.resume_from is None:
        return None
    if plan.resume_from != RESUME_LATEST:
        path = Path(plan.resume_from)
        if not path.is_file():
            raise SystemExit(f"{RESUME_FROM_ENV}: no checkpoint at {path}")
        return path, str(path)
    assert plan.directory is not None  # checkpoint_plan refuses latest without a directory
    step, source = latest_on_rank_0(plan, run) if info.rank == 0 else (-1, "")
    if info.distributed:
        agreed = torch.tensor([step], dtype=torch.int64, device=info.device)
        dist.broadcast(agreed, src=0)
        step = int(agreed.item())
        source = broadcast_bytes(source.encode(), info).decode()
    if step < 0:
        return None
    path = checkpoint_path(plan.directory, step)
    if plan.artifact and info.distributed:
        share_checkpoint(path, info)
    if not path.is_file():
        raise SystemExit(
            f"rank 0 resumes from {path}, which rank {info.rank} cannot read: every rank must "
            f"see the same {CHECKPOINT_DIR_ENV} (a shared volume)"
        )
    return path, source


def load_checkpoint(
    path: Path, params: HyperParams, model: nn.Module, optimizer: torch.optim.Optimizer
) -> Progress:
    """Restore the model, optimizer and RNG from ``path``; return the progress it records."""
    state = read_checkpoint(path)
    saved = dict(state["hyper_params"])
    # More epochs may continue a run; any other change would not train the model it saved.
    differ = sorted(k for k, v in asdict(params).items() if k != "epochs" and saved.get(k) != v)
    if differ:
        raise SystemExit(f"{path} was saved with other hyper-parameters: {', '.join(differ)}")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"])
    # A checkpoint of an older trainer holds no seconds: its training is not counted.
    seconds = float(state.get("trained_seconds", 0.0))
    return Progress(state["step"], list(state["epoch_losses"]), state["loss_sum"], seconds)


def build_model(params: HyperParams, info: DistInfo) -> nn.Module:
    """The MLP, seeded so every rank starts from the same weights, as DDP expects."""
    torch.manual_seed(params.seed)
    return nn.Sequential(
        nn.Linear(params.features, params.hidden_size),
        nn.ReLU(),
        nn.Linear(params.hidden_size, params.hidden_size),
        nn.ReLU(),
        nn.Linear(params.hidden_size, params.classes),
    ).to(info.device)


def epoch_order(params: HyperParams, epoch: int, samples: int, info: DistInfo) -> torch.Tensor:
    """This rank's batch order in ``epoch``, seeded: a re-run, or a resumed one, sees the same."""
    generator = torch.Generator().manual_seed(params.seed * 1000 + epoch)
    return torch.randperm(samples, generator=generator).to(info.device)


def train(
    params: HyperParams, info: DistInfo, run: Any, checkpoints: CheckpointPlan | None = None
) -> dict[str, float]:
    """Train, log to ``run`` (rank 0, or every rank in shared mode) and return the summary.

    With ``checkpoints`` it resumes from the checkpoint named there and saves its own (rank
    0); a stop asked by SIGTERM ends every rank after the same step, saved first.
    """
    checkpoints = checkpoints or CheckpointPlan(None, None, None)
    train_x, train_y, eval_x, eval_y = make_data(params)
    train_x, train_y = shard(train_x, info).to(info.device), shard(train_y, info).to(info.device)
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
        return eval_loss, eval_acc

    steps_per_epoch = math.ceil(train_x.shape[0] / params.batch_size)
    total_steps = steps_per_epoch * params.epochs
    save_every = checkpoints.every or steps_per_epoch
    eval_loss, eval_acc = evaluate(model, eval_x, eval_y, info)
    say(info, f"at step {progress.step}: eval/loss={eval_loss:.4f} eval/accuracy={eval_acc:.4f}")
    started = time.monotonic()
    order, order_epoch = None, 0
    _STOP.defer = True  # from here a SIGTERM ends training after a whole step (and a save)
    try:
        while progress.step < total_steps:
            epoch, batch = divmod(progress.step, steps_per_epoch)
            epoch += 1
            if order is None or order_epoch != epoch:
                order, order_epoch = epoch_order(params, epoch, train_x.shape[0], info), epoch
            idx = order[batch * params.batch_size : (batch + 1) * params.batch_size]
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(train_x[idx]), train_y[idx])
            loss.backward()
            optimizer.step()
            progress.step += 1
            # One all-reduce averages the loss and tells every rank whether one was told to stop.
            asked = torch.tensor([loss.item(), 1.0 if _STOP.signal else 0.0], device=info.device)
            totals = sum_over_ranks(asked, info)
            global_loss, stopping = totals[0].item() / info.world_size, totals[1].item() > 0
            progress.loss_sum += global_loss
            if logger is not None:
                logger.log({"train/step": progress.step, "train/loss": global_loss, "epoch": epoch})
            if batch == steps_per_epoch - 1:
                eval_loss, eval_acc = end_epoch(epoch)
            if stopping or progress.step % save_every == 0 or progress.step == total_steps:
                save()
            if stopping:
                say(info, f"stopping after step {progress.step}: asked to stop (SIGTERM)")
                raise SystemExit(128 + (_STOP.signal or signal.SIGTERM))
    finally:
        _STOP.defer = False

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


class _StopRequest:
    """A SIGTERM, and whether it may wait for the step in progress to end."""

    def __init__(self) -> None:
        self.defer = False
        self.signal = 0


_STOP = _StopRequest()


def _terminate(signum: int, _frame: Any) -> None:
    # Volcano aborts a job by deleting its pods (SIGTERM); turning that into SystemExit lets
    # the finally block finish the W&B run with an exit code instead of leaving it "running".
    # While training, the stop waits for the step in progress: a step cut in half would leave
    # the model half updated, and ranks stopping at different steps would wait on each other.
    _STOP.signal = signum
    if not _STOP.defer:
        raise SystemExit(128 + signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: set up the process group and W&B, train, tear down; return exit code."""
    signal.signal(signal.SIGTERM, _terminate)
    environ = dict(os.environ)
    args = parse_args(argv, environ)
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
        params = params_from_run_config(run, params, info)
        summary = train(params, info, run, checkpoints)
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

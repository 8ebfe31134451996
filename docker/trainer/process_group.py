"""Where this process sits in the job, and how the ranks talk to each other.

``MASTER_ADDR``, ``MASTER_PORT``, ``RANK``, ``WORLD_SIZE`` (set by Volcano's pytorch plugin, one
process per pod; or by ``torchrun``, one per GPU, which ``launch.py`` starts when the pod has
several) drive ``torch.distributed.init_process_group``; gloo on CPU, nccl when CUDA is
available, each process on the GPU its ``LOCAL_RANK`` names. Without ``WORLD_SIZE`` > 1 the
trainer runs as a single process, and the collectives here do nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

#: The provider's elastic range (``airflow_volcano_wandb/template/elastic.py``).
ELASTIC_ENV = "AVW_ELASTIC_WORKERS"


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
    elastic: tuple[int, int] | None = None
    """``(min_workers, max_workers)`` of an elastic job (``AVW_ELASTIC_WORKERS``): the world
    size may change at every re-formation, so the batch is global (``model.py``)."""
    restarts: int = 0
    """``torchrun``'s ``TORCHELASTIC_RESTART_COUNT``: re-formations (and failures) so far."""

    @property
    def distributed(self) -> bool:
        return self.backend is not None


def dist_info(environ: Mapping[str, str], backend: str) -> DistInfo:
    """Read rank and world size; pick the backend and device."""
    world_size = int(environ.get("WORLD_SIZE") or 1)
    rank = int(environ.get("RANK") or 0)
    # torchrun sets LOCAL_RANK (this process's GPU in the pod); the plugin alone runs one
    # process per pod and sets none, so 0 is right there.
    local_rank = int(environ.get("LOCAL_RANK") or 0)
    if not 0 <= rank < max(world_size, 1):
        raise SystemExit(f"RANK={rank} is outside WORLD_SIZE={world_size}")
    elastic = elastic_workers(environ)
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
        elastic=elastic,
        restarts=int(environ.get("TORCHELASTIC_RESTART_COUNT") or 0),
    )


def elastic_workers(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """``AVW_ELASTIC_WORKERS=MIN:MAX`` (the provider's ``elastic=``), or ``None``."""
    raw = (environ.get(ELASTIC_ENV) or "").strip()
    if not raw:
        return None
    low, _, high = raw.partition(":")
    if not (low.isdigit() and high.isdigit() and int(low) <= int(high)):
        raise SystemExit(f"{ELASTIC_ENV}={raw!r} is not MIN:MAX workers")
    return int(low), int(high)


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
    # The agent's store outlives a restart of the processes, so each start keeps to its own
    # keys; a store rank 0 hosts is new at every start. Not the restart count alone: under an
    # elastic launch a pod that joins late has counted fewer restarts than the others (each
    # agent counts its own), and its keys would never meet theirs.
    restarts = environ.get("TORCHELASTIC_RESTART_COUNT") or 0
    store = dist.PrefixStore(f"avw/{restarts}" if agent_store else "avw", store)
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


def sum_over_ranks(values: torch.Tensor, info: DistInfo) -> torch.Tensor:
    """Add a tensor up over all ranks (identity without a process group)."""
    if info.distributed:
        values = values.clone()
        dist.all_reduce(values, op=dist.ReduceOp.SUM)
    return values


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


def say(info: DistInfo, message: str) -> None:
    """Print one log line tagged with the rank (pod logs of all ranks end up side by side)."""
    print(f"[rank {info.rank}/{info.world_size}] {message}", flush=True)

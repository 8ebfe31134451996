"""The example trainer's model and data: a small MLP, on random data a fixed teacher labels.

The data is random but labelled by a fixed random linear "teacher", so the task is learnable
and ``eval/accuracy`` on a held-out set (same teacher, different inputs) means something:
chance is ``1 / classes``, a trained model gets well above it.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn

from hyperparameters import HyperParams
from process_group import DistInfo


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


def global_batch_share(
    order: torch.Tensor, batch: int, batch_size: int, info: DistInfo
) -> tuple[torch.Tensor, int]:
    """An elastic job's step: the ``batch``-th global batch of ``batch_size`` samples of the
    epoch's ``order`` (the same on every rank), split over the ranks (sizes differ by one at
    most). Returns this rank's indexes and the global batch's size. The effective batch is
    ``batch_size`` at any world size, so a step means the same work after a re-formation: the
    checkpoint's step is where the new world resumes, and the learning rate needs no change."""
    if info.world_size > batch_size:
        raise SystemExit(
            f"{info.world_size} ranks cannot share a global batch of {batch_size} samples: "
            "raise TRAIN_BATCH_SIZE to at least the largest world size"
        )
    whole = order[batch * batch_size : (batch + 1) * batch_size]
    return whole.tensor_split(info.world_size)[info.rank], int(whole.shape[0])


def epoch_order(params: HyperParams, epoch: int, samples: int, info: DistInfo) -> torch.Tensor:
    """This rank's batch order in ``epoch``, seeded: a re-run, or a resumed one, sees the same."""
    generator = torch.Generator().manual_seed(params.seed * 1000 + epoch)
    return torch.randperm(samples, generator=generator).to(info.device)

"""The example trainer's command line: its hyper-parameters, from flags or ``TRAIN_*`` env.

Every hyper-parameter is read here and only here (:func:`parse_args`, :func:`hyper_params`);
the rest of the trainer takes a :class:`HyperParams`. The two flags that are not
hyper-parameters say how the process group is joined (``--backend``, ``--dist-timeout``) and how
often the training loss is logged (``--log-every``).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass


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


def parse_args(
    argv: Sequence[str] | None, environ: Mapping[str, str], description: str
) -> argparse.Namespace:
    """Parse CLI flags; defaults come from ``TRAIN_<FLAG>`` env, then :class:`HyperParams`.
    ``description`` is what ``--help`` says the program is."""
    defaults = HyperParams()
    parser = argparse.ArgumentParser(description=description)
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
    parser.add_argument(
        "--log-every",
        type=int,
        default=environ.get("TRAIN_LOG_EVERY") or 1,  # argparse applies `type` to a text default
        help="log the training loss to W&B every N steps (env TRAIN_LOG_EVERY, default 1); "
        "the W&B SDK keeps up with a few records a second, and a run that logs faster delays "
        "what it learns from W&B, a stop from the W&B UI among it (docs/trainer.md)",
    )
    args = parser.parse_args(argv)
    for name in (
        "epochs",
        "batch_size",
        "hidden_size",
        "train_samples",
        "eval_samples",
        "log_every",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.classes < 2 or args.features < 1:
        parser.error("--classes must be >= 2 and --features >= 1")
    return args


def hyper_params(args: argparse.Namespace) -> HyperParams:
    """Collect the hyper-parameters from parsed args (they go into the W&B config)."""
    return HyperParams(**{name: getattr(args, name) for name in asdict(HyperParams())})

"""The trainer image's entrypoint: one training process per pod, or one per GPU.

Volcano's ``pytorch`` plugin starts one process per pod (``RANK``/``WORLD_SIZE`` count pods),
which leaves all but one GPU of a multi-GPU pod idle. The provider's renderer gives every rank
``PET_NPROC_PER_NODE`` (the container's GPU limit, ``1`` without one) and the rendezvous
``torchrun`` reads from ``PET_*`` env (docs/templates.md, "torchrun and /dev/shm"). So:

* ``PET_NPROC_PER_NODE`` unset or ``1``: ``python train.py ARGS``, with the plugin's env;
* anything else (``8``, ``gpu``...): ``python -m torch.distributed.run train.py ARGS``;
  ``torchrun`` reads its options from the ``PET_*`` env and gives each of its processes
  ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` counting processes, not pods.

A target Volcano before v1.12.3 has no ``hcclrank`` plugin, so the renderer sets no
``PET_NODE_RANK``; the pod's rank is then the plugin's ``RANK`` (one per pod), which becomes
the node rank here. ``python -m torch.distributed.run`` rather than the ``torchrun`` script:
the same interpreter, and some distributions' torch packages install no script.

The decision is :func:`launch` (pure); the process is replaced (``exec``), so Volcano's SIGTERM
reaches ``torchrun``, which passes it to its processes. Imports nothing beyond the standard
library, so choosing costs no ``import torch``. Docs: ``docs/trainer.md``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

TRAIN_PY = str(Path(__file__).resolve().with_name("train.py"))
NPROC_ENV = "PET_NPROC_PER_NODE"
NODE_RANK_ENV = "PET_NODE_RANK"


def launch(
    environ: Mapping[str, str], args: Sequence[str], python: str
) -> tuple[list[str], dict[str, str]]:
    """The command to exec and the env to add to the container's, for this pod's env."""
    nproc = (environ.get(NPROC_ENV) or "1").strip()
    if nproc == "1":
        return [python, TRAIN_PY, *args], {}
    extra = {}
    if NODE_RANK_ENV not in environ and environ.get("RANK"):
        extra[NODE_RANK_ENV] = environ["RANK"]
    return [python, "-m", "torch.distributed.run", TRAIN_PY, *args], extra


def main() -> None:
    argv, extra = launch(os.environ, sys.argv[1:], sys.executable)
    env = {**os.environ, **extra}
    # One line, so a pod log says how its processes were started (the two counts only).
    shown = " ".join(f"{name}={env.get(name, '-')}" for name in (NPROC_ENV, NODE_RANK_ENV))
    print(f"avw-launch: {shown}: {' '.join(argv[1:])}", flush=True)
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    main()

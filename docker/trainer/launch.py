"""The trainer image's entrypoint: one training process per pod, or one per GPU.

Volcano's ``pytorch`` plugin starts one process per pod (``RANK``/``WORLD_SIZE`` count pods),
which leaves all but one GPU of a multi-GPU pod idle. The provider's renderer gives every rank
``PET_NPROC_PER_NODE`` (the container's GPU limit, ``1`` without one) and the rendezvous
``torchrun`` reads from ``PET_*`` env (docs/templates.md, "torchrun and /dev/shm"). So:

* ``PET_NPROC_PER_NODE`` unset or ``1``: ``python train.py ARGS``, with the plugin's env;
* anything else (``8``, ``gpu``...), or an elastic job's pod (``PET_RDZV_BACKEND``, one
  process or more): ``python -m torch.distributed.run train.py ARGS``;
  ``torchrun`` reads its options from the ``PET_*`` env and gives each of its processes
  ``RANK``/``LOCAL_RANK``/``WORLD_SIZE`` counting processes, not pods.

More processes than the pod has GPUs are refused before any starts: each process takes GPU
``LOCAL_RANK`` (``process_group.py``), so two would share one and NCCL would stop them with
"Duplicate GPU detected", but only after every rank had joined. The GPUs are counted as the
trainer counts them, ``torch.cuda.device_count()`` (which heeds ``CUDA_VISIBLE_DEVICES``); a
pod where torch sees none runs its processes on CPU over gloo, as many as asked.

A target Volcano before v1.12.3 has no ``hcclrank`` plugin, so the renderer sets no
``PET_NODE_RANK``; the pod's rank is then the plugin's ``RANK`` (one per pod), which becomes
the node rank here. ``python -m torch.distributed.run`` rather than the ``torchrun`` script:
the same interpreter, and some distributions' torch packages install no script.

The decision is :func:`launch` (pure: the GPU count is a function it is given); the process is
replaced (``exec``), or runs ``torchrun`` in itself where its torch needs
:func:`mend_std_parse`, so Volcano's SIGTERM reaches ``torchrun``, which passes it to its
processes. Imports nothing beyond the standard library at the top: one process per pod costs
no ``import torch``; only a numeric ``PET_NPROC_PER_NODE`` above 1 imports it.
Docs: ``docs/trainer.md``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

TRAIN_PY = str(Path(__file__).resolve().with_name("train.py"))
NPROC_ENV = "PET_NPROC_PER_NODE"
NODE_RANK_ENV = "PET_NODE_RANK"
#: Set (``c10d``) in an elastic job's pods: ``torchrun`` runs even one process per pod, since
#: its agent re-forms the world when a pod leaves or joins and restarts ``train.py`` in it.
RDZV_BACKEND_ENV = "PET_RDZV_BACKEND"
#: Where torch parses ``torchrun``'s ``Std`` options, under the torch package.
ELASTIC_STD_SOURCE = ("distributed", "elastic", "multiprocessing", "api.py")


def visible_gpus() -> int | None:
    """The GPUs this pod's processes can use: ``torch.cuda.device_count()``, the count
    ``process_group.py`` places the ranks on. ``None`` without torch (``torchrun``, which needs
    it, then fails on its own)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. torch's "Failed to initialize NumPy"
            import torch
    except ImportError:
        return None
    return int(torch.cuda.device_count())


def too_many_processes(nproc: str, gpus: int) -> str:
    """Why a pod asking for more processes than it has GPUs is refused, naming both counts."""
    plural = "" if gpus == 1 else "s"
    return (
        f"avw-launch: {NPROC_ENV}={nproc} asks for {int(nproc)} processes in this pod, but it "
        f"has {gpus} GPU{plural} (torch.cuda.device_count()): every process needs a GPU of its "
        f'own, and NCCL would stop them with "Duplicate GPU detected" once they had joined. '
        f"Set {NPROC_ENV} to at most {gpus}, or give the container {int(nproc)} GPUs (the "
        "provider sets it to the container's nvidia.com/gpu limit); no process was started"
    )


def launch(
    environ: Mapping[str, str],
    args: Sequence[str],
    python: str,
    *,
    gpus: Callable[[], int | None],
) -> tuple[list[str], dict[str, str]]:
    """The command to exec and the env to add to the container's, for this pod's env.

    ``gpus`` counts the GPUs the pod's processes can use (:func:`visible_gpus` in a pod;
    ``None``: unknown); it is called only for a numeric ``PET_NPROC_PER_NODE`` above 1.
    More processes than GPUs, with at least one GPU, raise ``SystemExit`` naming both counts.
    (``gpu`` and ``auto`` let ``torchrun`` count the GPUs itself, so they never ask for more.)
    """
    nproc = (environ.get(NPROC_ENV) or "1").strip()
    elastic = bool(environ.get(RDZV_BACKEND_ENV))
    if nproc == "1" and not elastic:
        return [python, TRAIN_PY, *args], {}
    if nproc.isdigit() and int(nproc) > 1:
        available = gpus()
        # No GPU: the processes run on CPU over gloo, as many as asked (a CPU trial).
        if available and int(nproc) > available:
            raise SystemExit(too_many_processes(nproc, available))
    extra = {}
    # An elastic job's rendezvous ranks the pods at every re-formation: no fixed node rank.
    if not elastic and NODE_RANK_ENV not in environ and environ.get("RANK"):
        extra[NODE_RANK_ENV] = environ["RANK"]
    return [python, "-m", "torch.distributed.run", TRAIN_PY, *args], extra


def std_parse_broken() -> bool:
    """torch 1.13 (the image's Debian package) on Python 3.11+: ``torchrun`` parses its
    ``--redirects``/``--tee`` (default ``"0"``) by looking the number up among the members
    ``Std`` iterates over (``for s in Std``), and a Flag's iteration skips ``NONE`` (0) and
    ``ALL`` (3) since 3.11, so the agent fails on ``None`` before it starts a process. Read
    from torch's source, without importing it (a newer torch builds ``Std(int(v))``)."""
    if sys.version_info < (3, 11):
        return False
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return False
    api = Path(next(iter(spec.submodule_search_locations)), *ELASTIC_STD_SOURCE)
    try:
        return "for s in Std:" in api.read_text()
    except OSError:
        return False


def mend_std_parse() -> None:
    """Parse ``Std`` by value (:func:`std_parse_broken`)."""
    from torch.distributed.elastic.multiprocessing import api

    def from_str(value: str) -> object:
        if ":" not in value:
            return api.Std(int(value))
        return {int(k): api.Std(int(v)) for k, v in (p.split(":") for p in value.split(","))}

    api.Std.from_str = staticmethod(from_str)  # type: ignore[method-assign]


def main() -> None:
    argv, extra = launch(os.environ, sys.argv[1:], sys.executable, gpus=visible_gpus)
    env = {**os.environ, **extra}
    # One line, so a pod log says how its processes were started (the two counts only).
    shown = " ".join(f"{name}={env.get(name, '-')}" for name in (NPROC_ENV, NODE_RANK_ENV))
    print(f"avw-launch: {shown}: {' '.join(argv[1:])}", flush=True)
    if argv[1:3] == ["-m", "torch.distributed.run"] and std_parse_broken():
        # In this process (the same pid, so Volcano's SIGTERM still reaches torchrun), with
        # torch 1.13's option parse mended; a torch that parses right is exec'd as before.
        import runpy

        os.environ.update(extra)
        mend_std_parse()
        sys.argv = ["torchrun", *argv[3:]]
        runpy.run_module("torch.distributed.run", run_name="__main__", alter_sys=True)
        return
    os.execve(argv[0], argv, env)


if __name__ == "__main__":
    main()

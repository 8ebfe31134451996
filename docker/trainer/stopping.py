"""How the example trainer stops: asked by Volcano (SIGTERM) or from the W&B UI or API.

A SIGTERM (Volcano deletes a job's pods to abort it) becomes ``SystemExit(128 + signal)``, at
once before training and after the step in progress while training (:data:`STOP`, which
``training.py`` reads). A stop from W&B reaches the SDK's ``stop_fn`` (:func:`stop_from_wandb`),
and ``train.py`` exits with :data:`STOPPED_FROM_WANDB_EXIT_CODE`, leaving
:data:`STOPPED_FROM_WANDB_MARKER` in the container's termination message.
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


# Set by stop_from_wandb: the KeyboardInterrupt that follows is W&B's stop, not a Ctrl-C.
_STOPPED_FROM_WANDB = threading.Event()


def stop_from_wandb() -> None:
    """The W&B SDK's ``stop_fn``: the run was stopped from the W&B UI or API.

    Called on the SDK's own thread. It records the stop and interrupts the main thread (as the
    SDK's default does), so ``train.py``'s ``main`` finishes the W&B run and exits with
    :data:`STOPPED_FROM_WANDB_EXIT_CODE`, which the provider tells from any other failure.
    """
    _STOPPED_FROM_WANDB.set()
    print("W&B says this run was stopped: ending training", flush=True)
    _thread.interrupt_main()


def was_stopped_from_wandb() -> bool:
    """Whether :func:`stop_from_wandb` was called: the ``KeyboardInterrupt`` is W&B's stop."""
    return _STOPPED_FROM_WANDB.is_set()


def handling_wandb_stop() -> None:
    """The main thread handles W&B's stop from here on. The interrupt :func:`stop_from_wandb`
    sends after setting its flag may still be on its way when the training loop saw the flag
    first and ended itself; arriving during the handling (the termination message, the run's
    finish), it cut it short and the trainer exited 1, not
    :data:`STOPPED_FROM_WANDB_EXIT_CODE`. A no-op SIGINT handler swallows it (Python runs the
    handler a simulated interrupt reaches). Main thread only, as any signal handler."""
    signal.signal(signal.SIGINT, lambda signum, frame: None)


def leave_termination_message(environ: Mapping[str, str], message: str) -> None:
    """Write the container's termination message, where there is one to write: the kubelet
    mounts ``/dev/termination-log`` in a pod; a trainer run by hand has none (and is never
    to create one on its machine)."""
    path = Path(environ.get(TERMINATION_LOG_ENV) or DEFAULT_TERMINATION_LOG)
    if TERMINATION_LOG_ENV not in environ and not path.exists():
        return
    with contextlib.suppress(OSError):
        path.write_text(message + "\n")


class StopRequest:
    """A SIGTERM, and whether it may wait for the step in progress to end."""

    def __init__(self) -> None:
        self.defer = False
        self.signal = 0


#: This process's stop request: set by its SIGTERM handler, read by the training loop.
STOP = StopRequest()


def handle_sigterm() -> None:
    """Turn this process's SIGTERM into a stop (:func:`_terminate`)."""
    signal.signal(signal.SIGTERM, _terminate)


def _terminate(signum: int, _frame: Any) -> None:
    # Volcano aborts a job by deleting its pods (SIGTERM); turning that into SystemExit lets
    # the finally block finish the W&B run with an exit code instead of leaving it "running".
    # While training, the stop waits for the step in progress: a step cut in half would leave
    # the model half updated, and ranks stopping at different steps would wait on each other.
    STOP.signal = signum
    if not STOP.defer:
        raise SystemExit(128 + signum)

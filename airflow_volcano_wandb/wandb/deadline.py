"""A wall-clock bound on a call that has none of its own.

The wandb SDK retries W&B API calls on its own schedule, so ``wandb.Api``'s HTTP timeout
bounds one request, not the call, and an unreachable W&B could hold a task's end for many
minutes after its job finished. What the provider reads from or writes to W&B after the job
is best-effort, so it runs under :func:`call_within`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def call_within(seconds: float, call: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call(*args, **kwargs)``, or :class:`TimeoutError` once ``seconds`` have passed.

    The call runs in a daemon thread: when time is up it is abandoned, not stopped, and cannot
    keep the process from exiting. Use it only for calls whose late result can be dropped.

    :param seconds: how long to wait for the call.
    :param call: what to call; its exception, if it raises in time, is raised here.
    :raises TimeoutError: when the call has not returned after ``seconds``.
    """
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = call(*args, **kwargs)
        except BaseException as exc:  # handed to the caller's thread below
            outcome["error"] = exc

    name = getattr(call, "__qualname__", "call")
    thread = threading.Thread(target=run, name=f"avw-within-{name}", daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        raise TimeoutError(f"{name} gave no answer within {seconds:g} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]

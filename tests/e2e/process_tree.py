"""A process and every process under it, whatever their process groups: what a lost pod or
node takes with it.

``AirflowStack.kill`` signals a component's process group, which holds most of its processes,
but not Airflow's task runner: the supervisor puts it in a group of its own (``setpgid``, so
its own signals reach the task's subprocesses). A Celery worker's group SIGKILLed thus leaves
the task runner alive without its supervisor, which no lost pod does: the container's every
process dies with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path


def descendants(root: int) -> list[tuple[int, int]]:
    """``(pid, process group)`` of every process under ``root`` (from ``/proc``)."""
    children: dict[int, list[tuple[int, int]]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()  # after the command's name
            children.setdefault(int(fields[1]), []).append((int(stat.parent.name), int(fields[2])))
    found, todo = [], [root]
    while todo:
        for pid, pgid in children.get(todo.pop(), []):
            found.append((pid, pgid))
            todo.append(pid)
    return found


def sigkill_tree(root: int) -> None:
    """SIGKILL ``root``'s process group and the group of every process under it. Each group is
    stopped first, so that none forks, or acts on another's death, before all are killed."""
    groups = {pgid for _, pgid in descendants(root)}
    with contextlib.suppress(ProcessLookupError):
        groups.add(os.getpgid(root))
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, sig)

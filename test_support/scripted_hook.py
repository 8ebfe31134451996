"""A stand-in for the sync ``VolcanoHook``, for the job/ modules that take one: each read
answers what the test scripted (an exception is raised), and every call is recorded."""

from __future__ import annotations

from typing import Any


class ScriptedVolcanoHook:
    """``get_job`` answers ``jobs`` in turn (the last one again and again), ``delete_job``
    loses its precondition ``conflicts`` times, ``get_queue``/``list_nodes`` answer
    ``queue``/``nodes``."""

    def __init__(
        self,
        jobs: list[Any] | None = None,
        *,
        conflicts: int = 0,
        queue: Any = None,
        nodes: Any = None,
    ) -> None:
        self.jobs, self.conflicts = list(jobs or [None]), conflicts
        self.queue, self.nodes = queue, nodes
        self.reads: list[tuple[str, ...]] = []
        self.deletes: list[tuple[str, str, str | None, str | None]] = []

    def get_job(self, name: str, namespace: str) -> Any:
        return _answer(self.jobs.pop(0) if len(self.jobs) > 1 else self.jobs[0])

    def delete_job(
        self,
        name: str,
        namespace: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        self.deletes.append((name, namespace, uid, resource_version))
        if self.conflicts:
            self.conflicts -= 1
            return False
        return True

    def get_queue(self, name: str) -> Any:
        self.reads.append(("queue", name))
        return _answer(self.queue)

    def list_nodes(self) -> Any:
        self.reads.append(("nodes",))
        return _answer(self.nodes)


def _answer(answer: Any) -> Any:
    if isinstance(answer, Exception):
        raise answer
    return answer

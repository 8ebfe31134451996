"""What a try does about its job, decided once from what was read (pure).

:func:`plan` takes one read (this task instance's jobs as one LIST shows them, and the job the
task state store remembers) and returns the intent a fresh job stands for and the steps that
``job.submission`` carries out in order: clear what must go, then reuse, adopt or create.
:func:`plan_taken` decides on a job a create finds holding the name. Every log line and
refusal is data here, so the whole decision is testable without a cluster. The rules are
``job.ownership``'s; a reported job meets a create only under a fixed name (``job_name``),
and is then replaced when an earlier try of this very task instance reported it, else refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, NamedTuple

from airflow_volcano_wandb.job import job_status
from airflow_volcano_wandb.job.endings import Ending
from airflow_volcano_wandb.job.ownership import (
    TRY_NUMBER_ANNOTATION,
    TaskInstanceIdentity,
    is_reported,
    next_intent,
    owner_of,
    owner_try,
    replaceable_past,
    reported_by,
)

Job = Mapping[str, Any]


class Action(str, Enum):
    """One step of a plan."""

    REUSE = "reuse"  # this try's job: wait on it (or report it, if it completed)
    ADOPT = "adopt"  # another try's job to reuse: make it this try's first
    DELETE = "delete"  # an earlier, unreusable job: delete it and wait until it is gone
    WAIT_GONE = "wait_gone"  # being deleted already (a kill or clear): wait until it is gone
    REPLACE = "replace"  # an earlier try's reported job holds the name: confirmed delete
    CREATE = "create"  # write the key's Secret, then create the rendered job
    REFUSE = "refuse"  # the name is another owner's or a reported outcome: submit nothing


class Line(NamedTuple):
    """A log line, as ``logging`` takes it: a %-format and its arguments."""

    message: str
    args: tuple[Any, ...] = ()


@dataclass(frozen=True)
class Step:
    """What to do, to which job, and what to say about it."""

    action: Action
    job: Job | None = None
    #: Logged when the step acts; a reattach's once the job is this try's.
    lines: tuple[Line, ...] = ()
    #: ADOPT: the annotations that make the job this try's.
    annotations: Mapping[str, str] | None = None
    #: ADOPT: the rest of the plan, should the job be gone before it is adopted.
    if_gone: tuple[Step, ...] = ()
    #: REFUSE: why nothing was submitted (the error's message).
    reason: str = ""


@dataclass(frozen=True)
class Try:
    """The try the plan is for."""

    identity: TaskInstanceIdentity
    try_number: int
    #: ``reattach_on_restart``: a live job of this task instance is waited on, not replaced.
    reattach: bool


@dataclass(frozen=True)
class Plan:
    #: The intent a fresh job stands for (see ``ownership.next_intent``).
    intent: int
    steps: tuple[Step, ...]


def plan(listed: Sequence[Job], this_try: Try, remembered: Job | None = None) -> Plan:
    """The plan from one read.

    :param listed: this task instance's jobs, as the label search lists them.
    :param remembered: the very job (same uid) the task state store names, if it exists; it
        goes first when it may be reused, and is otherwise left to the label search.
    """
    intent = next_intent(listed, this_try.try_number)
    if remembered is not None and _reusable(remembered, this_try.reattach):
        uid = remembered["metadata"]["uid"]
        rest = [job for job in listed if job["metadata"].get("uid") != uid]
        meta = remembered["metadata"]
        said = Line(
            "The task state store names job %s/%s (uid %s)",
            (meta["namespace"], meta["name"], uid),
        )
        return Plan(intent, (_reattach(remembered, this_try, _steps(rest, this_try), said),))
    return Plan(intent, _steps(listed, this_try))


def plan_taken(held: Job | None, this_try: Try) -> tuple[Step, ...]:
    """The steps when the create found its name taken by ``held`` (``None``: gone since)."""
    if held is None:
        return (Step(Action.CREATE),)
    meta = held["metadata"]
    where = f"{meta['namespace']}/{meta['name']}"
    if not this_try.identity.owns(held):
        return _refuse(
            f"A Volcano job named {where} already exists and belongs to {owner_of(held)}; set "
            "job_name or a template name that is unique per task instance. Nothing was submitted."
        )
    if not is_reported(held):
        # Our own create whose answer was lost, or a concurrent try: the job is ours.
        return _steps([held], this_try)
    if not replaceable_past(held, this_try.identity, this_try.try_number):
        return _refuse(
            f"A Volcano job named {where} holds an outcome of this task instance that try "
            f"{reported_by(held)} already reported (an Airflow metadata DB reset, or a second "
            "deployment without [volcano_wandb] deployment?); it was left alone and nothing was "
            "submitted."
        )
    said = Line(
        "Replacing Volcano job %s/%s: try %s reported its outcome, and this try needs its name",
        (meta["namespace"], meta["name"], reported_by(held)),
    )
    return Step(Action.REPLACE, held, (said,)), Step(Action.CREATE)


def _steps(listed: Sequence[Job], this_try: Try) -> tuple[Step, ...]:
    """Clear this task instance's earlier jobs in the order listed, up to the first one this
    try may reuse; create when there is none. Reported jobs are left alone."""
    steps: list[Step] = []
    for index, job in enumerate(listed):
        if is_reported(job):  # clearing a successful task must train again, not count it
            continue
        status = job_status.interpret(job)
        if _reusable(job, this_try.reattach):
            rest = _steps(listed[index + 1 :], this_try)
            return (*steps, _reattach(job, this_try, rest))
        if status.ending is Ending.DELETED:
            # Being deleted (a kill or clear of an earlier try): reattaching would only see
            # it vanish.
            said = Line(
                "Earlier job %s/%s is being deleted; waiting for it to go before resubmitting",
                (status.namespace, status.name),
            )
            steps.append(Step(Action.WAIT_GONE, job, (said,)))
        else:
            said = Line(
                "Deleting this task instance's earlier job %s/%s (%s) before resubmitting",
                (status.namespace, status.name, status.phase or "no phase"),
            )
            steps.append(Step(Action.DELETE, job, (said,)))
    return (*steps, Step(Action.CREATE))


def _reusable(job: Job, reattach: bool) -> bool:
    """An unreported job that is no past result: completed (this task's success), or live
    and ``reattach``. A dying one is not: reattaching would only see it vanish."""
    if is_reported(job):
        return False
    status = job_status.interpret(job)
    return status.ending is Ending.SUCCEEDED or (reattach and not status.terminal)


def _reattach(job: Job, this_try: Try, if_gone: tuple[Step, ...], *said: Line) -> Step:
    """Reuse ``job``; adopt it first when another try owns it, so that try's late
    ``on_kill`` leaves it alone."""
    status = job_status.interpret(job)
    if not status.terminal:
        said = (
            *said,
            Line(
                "Reattaching to running Volcano job %s/%s (%s)",
                (status.namespace, status.name, status.progress()),
            ),
        )
    if owner_try(job) == this_try.try_number:
        return Step(Action.REUSE, job, said)
    mine = {TRY_NUMBER_ANNOTATION: str(this_try.try_number)}
    return Step(Action.ADOPT, job, said, annotations=mine, if_gone=if_gone)


def _refuse(reason: str) -> tuple[Step, ...]:
    return (Step(Action.REFUSE, reason=reason),)

"""What Volcano v1.14.1 accepts: policy events and actions, and the arguments of job plugins.

Sources (volcano.sh/volcano v1.14.1): the admission webhook's ``policyEventMap`` and
``policyActionMap`` in ``pkg/webhooks/admission/jobs/validate/util.go`` (the bus API defines
more events and actions, but marks the rest internal and the webhook rejects them), and the
``pytorch``/``mpi`` plugins' flag sets (``--master``, default ``master``; ``--worker``, default
``worker``). Which plugins each release registers is ``plugins.py``'s table.
"""

from __future__ import annotations

from typing import Any

from airflow_volcano_wandb.template.errors import Path, error_at

#: Events a user may put in a policy (``Unknown`` is the job-unknown event).
POLICY_EVENTS = frozenset(
    {
        "*",
        "PodFailed",
        "PodEvicted",
        "PodPending",
        "Unknown",
        "TaskCompleted",
        "TaskFailed",
        "JobUpdated",
    }
)
#: Events that exist in Volcano's bus API but are internal; the admission webhook rejects them.
INTERNAL_EVENTS = frozenset({"OutOfSync", "CommandIssued", "PodRunning"})
#: Actions a user may put in a policy.
POLICY_ACTIONS = frozenset(
    {
        "AbortJob",
        "RestartJob",
        "RestartTask",
        "RestartPod",
        "RestartPartition",
        "TerminateJob",
        "CompleteJob",
        "ResumeJob",
    }
)
#: Internal actions the admission webhook rejects.
INTERNAL_ACTIONS = frozenset({"SyncJob", "EnqueueJob", "SyncQueue", "OpenQueue", "CloseQueue"})
#: Plugins whose ``--master``/``--worker`` arguments name tasks.
ROLE_PLUGINS = ("pytorch", "mpi")
DEFAULT_ROLES = {"master": "master", "worker": "worker"}

MASTER_POLICY = {"event": "TaskCompleted", "action": "CompleteJob"}


def plugin_roles(arguments: list[Any]) -> tuple[dict[str, str], set[str]]:
    """Parse ``--master``/``--worker`` as Go's ``flag`` package does (``-x=v``, ``--x=v``,
    ``--x v``). Returns the role -> task mapping (defaults filled in) and the roles given
    explicitly."""
    roles = dict(DEFAULT_ROLES)
    explicit: set[str] = set()
    i = 0
    while i < len(arguments):
        argument = arguments[i]
        i += 1
        if not isinstance(argument, str) or not argument.startswith("-"):
            continue
        flag, has_value, value = argument.lstrip("-").partition("=")
        if flag in roles:
            if not has_value and i < len(arguments) and isinstance(arguments[i], str):
                value = arguments[i]
                i += 1
            roles[flag] = value
            explicit.add(flag)
    return roles, explicit


def pytorch_roles(job: dict[str, Any]) -> tuple[dict[str, str], list[Any]] | None:
    """The ``pytorch`` plugin's master/worker task names and its arguments, or ``None``."""
    plugins = job["spec"].get("plugins")
    arguments = plugins.get("pytorch") if isinstance(plugins, dict) else None
    if not isinstance(arguments, list):
        return None
    return plugin_roles(arguments)[0], arguments


def _policy_events(policy: dict[str, Any]) -> list[Any]:
    events = list(policy.get("events") or []) if isinstance(policy.get("events"), list) else []
    return [*events, policy["event"]] if "event" in policy else events


def ensure_master_policy(task: dict[str, Any], task_path: Path) -> None:
    """Add ``TaskCompleted -> CompleteJob`` to the master task unless it is there.

    This is the contract the operator's wait relies on: the job finishes (``Completing`` ->
    ``Completed``) when the master finishes, even though workers never exit on their own.
    A master that maps ``TaskCompleted`` (or ``*``) to another action contradicts the
    contract; that is an error rather than a silent duplicate event Volcano would reject.
    """
    policies = task.setdefault("policies", [])
    path = (*task_path, "policies")
    if not isinstance(policies, list):
        raise error_at(path, "must be a list of policies")
    for i, policy in enumerate(policies):
        if not isinstance(policy, dict):
            continue
        events = _policy_events(policy)
        if "TaskCompleted" in events or "*" in events:
            if policy.get("action") == "CompleteJob":
                return
            raise error_at(
                (*path, i),
                f"the pytorch master task maps {'*' if '*' in events else 'TaskCompleted'} to "
                f"{policy.get('action')!r}; the job would not complete when the master does. "
                "Use action CompleteJob, or pass add_master_policy=False to keep it",
            )
    policies.append(dict(MASTER_POLICY))

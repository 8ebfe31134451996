"""What a deployment refuses in a rendered job: ``render_job``'s policy keywords, declared here.

Each check lives in its own module (``pod_security``, ``allow_lists``, ``secret_refs``); this
one checks the keywords once, before rendering, and runs every check on the rendered job so
that all problems are reported together.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.template import allow_lists, gpus, secret_refs
from airflow_volcano_wandb.template.errors import Problems, error_at
from airflow_volcano_wandb.template.options import keep_checked, option
from airflow_volcano_wandb.template.pod_security import DEFAULT_LEVEL, check_level
from airflow_volcano_wandb.template.pod_security import violations as pod_violations
from airflow_volcano_wandb.template.shaping import DEFAULT_SCHEDULER_NAME
from airflow_volcano_wandb.template.values import show

#: Only Volcano's scheduler keeps the gang together and the job inside its queue's quota.
DEFAULT_ALLOWED_SCHEDULERS = (DEFAULT_SCHEDULER_NAME,)


def _allow_list(argument: str) -> Callable[[Any], tuple[str, ...] | None]:
    return lambda value: allow_lists.as_allow_list(value, argument)


def _gpu_cap(value: Any) -> int | None:
    """``max_total_gpus``: ``None``, or a count of GPUs (a digit string from a form too)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if type(value) is not int or value < 0:
        raise error_at(("max_total_gpus",), f"must be a whole number of GPUs, not {show(value)}")
    return value


@dataclass(frozen=True, kw_only=True)
class Policy:
    """What the deployment allows, each list checked as it is built; ``None`` means "no list"
    where a list is optional."""

    pod_security: str = option(
        DEFAULT_LEVEL,
        """the Pod Security Standards level every pod template must meet: ``privileged`` (no
        checks), ``baseline`` or ``restricted``.""",
        check=check_level,
    )
    allowed_images: Sequence[str] | None = option(
        None,
        """fnmatch patterns (``registry.example.com/team/*``); every rendered container image,
        init and ephemeral containers too, must match one. ``None``: any image.""",
        check=_allow_list("allowed_images"),
    )
    allowed_namespaces: Sequence[str] | None = option(
        None,
        """exact names; the final namespace must be one of them, and a template namespace on
        the list is honoured. ``None``: no list.""",
        check=_allow_list("allowed_namespaces"),
    )
    allowed_service_accounts: Collection[str] | None = option(
        None,
        """the accounts pod templates may name. ``None``: only ``service_account``, so with
        neither, a template may not name an account.""",
        check=_allow_list("allowed_service_accounts"),
    )
    allowed_secrets: Collection[str] | None = option(
        None,
        """exact names of the Secrets pod templates may name (``env`` ``secretKeyRef``,
        ``envFrom``, ``secret``, ``projected`` and driver volumes, ``imagePullSecrets``),
        whatever set them (template, macro, ``env``). The Secrets ``run_env`` reads (the run's
        own key) are always allowed. ``None``: no others. A pod can read any Secret it names,
        whatever its service account may do; see docs/security.md.""",
        check=_allow_list("allowed_secrets"),
    )
    allowed_schedulers: Collection[str] | None = option(
        DEFAULT_ALLOWED_SCHEDULERS,
        """the ``schedulerName`` values the job and its pod templates may have; by default
        only ``volcano`` (another scheduler ignores the gang and the queue's quota). ``None``:
        any.""",
        check=_allow_list("allowed_schedulers"),
    )
    allowed_queues: Collection[str] | None = option(
        None,
        """exact names; the final ``spec.queue`` (``default`` when unset, as Volcano fills it)
        must be one of them. ``None``: any.""",
        check=_allow_list("allowed_queues"),
    )
    allowed_priority_classes: Collection[str] | None = option(
        None,
        """exact names; every ``priorityClassName`` (the job's and the pod templates') must be
        one of them. ``None``: any.""",
        check=_allow_list("allowed_priority_classes"),
    )
    max_total_gpus: int | None = option(
        None,
        """the most GPUs the whole gang may ask for (replicas times each pod's
        ``<vendor>/gpu`` limits, over every task): a cap on what a Trigger form's replicas and
        GPUs per worker can add up to, refused before anything is submitted. ``None``: no
        cap.""",
        check=_gpu_cap,
        templated=True,
    )
    #: The account ``render_job`` runs the pods as (``service_account``), if any.
    service_account: str | None = None
    #: The Secrets the provider's own env reads (the run's key), allowed whatever
    #: ``allowed_secrets`` says.
    provider_secrets: frozenset[str] = frozenset()
    #: The accounts pods may name: the allow-list if given (``service_account`` must be on
    #: it), else only ``service_account``.
    service_accounts: frozenset[str] = field(init=False, default=frozenset())

    def __post_init__(self) -> None:
        keep_checked(self)
        names, account = self.allowed_service_accounts, self.service_account
        if not isinstance(account, str):
            account = None  # not a name: apply_service_account refuses it, naming the field
        if names is None:
            names = (account,) if account is not None else ()
        elif account is not None and account not in names:
            raise error_at(
                ("service_account",),
                f"{show(account)} is not in allowed_service_accounts ({', '.join(names)})",
            )
        object.__setattr__(self, "service_accounts", frozenset(names))

    def problems(
        self, job: dict[str, Any], tasks: list[dict[str, Any]], namespace_source: str
    ) -> Problems:
        """Every field of the rendered job this policy refuses, with its JSON path."""
        problems: Problems = []
        for i, task in enumerate(tasks):
            template = task.get("template")
            if isinstance(template, dict):
                problems += pod_violations(
                    template, ("spec", "tasks", i, "template"), self.pod_security
                )
        if self.allowed_images is not None:
            problems += allow_lists.image_problems(tasks, self.allowed_images)
        if self.allowed_namespaces is not None:
            namespace = job["metadata"].get("namespace")
            problems += allow_lists.namespace_problems(
                namespace, self.allowed_namespaces, namespace_source
            )
        problems += allow_lists.service_account_problems(tasks, self.service_accounts)
        problems += secret_refs.secret_problems(
            tasks, frozenset(self.allowed_secrets or ()) | self.provider_secrets
        )
        if self.allowed_schedulers is not None:
            problems += allow_lists.scheduler_problems(job, tasks, self.allowed_schedulers)
        if self.allowed_queues is not None:
            problems += allow_lists.queue_problems(job, self.allowed_queues)
        if self.allowed_priority_classes is not None:
            problems += allow_lists.priority_class_problems(
                job, tasks, self.allowed_priority_classes
            )
        if self.max_total_gpus is not None:
            problems += gpus.gpu_budget_problems(tasks, self.max_total_gpus)
        return problems

"""What a deployment refuses in a rendered job, gathered from ``render_job``'s arguments.

Each check lives in its own module (``pod_security``, ``allow_lists``, ``secret_refs``); this
one checks the arguments once, before rendering, and runs every check on the rendered job so
that all problems are reported together.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.template import allow_lists, gpus, secret_refs
from airflow_volcano_wandb.template.errors import Path, error_at
from airflow_volcano_wandb.template.pod_security import check_level
from airflow_volcano_wandb.template.pod_security import violations as pod_violations
from airflow_volcano_wandb.template.values import show

Problems = list[tuple[Path, str]]


def _allowed_service_accounts(
    service_account: str | None, allowed: Collection[str] | None
) -> frozenset[str]:
    """The accounts pods may name: the allow-list if given (``service_account`` must be on
    it), else only ``service_account``."""
    names = allow_lists.as_allow_list(allowed, "allowed_service_accounts")
    if names is None:
        return frozenset({service_account} if service_account is not None else ())
    if service_account is not None and service_account not in names:
        raise error_at(
            ("service_account",),
            f"{show(service_account)} is not in allowed_service_accounts ({', '.join(names)})",
        )
    return frozenset(names)


@dataclass(frozen=True)
class Policy:
    """The checked allow-lists; ``None`` means "no list" where a list is optional."""

    level: str
    images: tuple[str, ...] | None
    namespaces: tuple[str, ...] | None
    service_accounts: frozenset[str]
    secrets: frozenset[str]
    schedulers: tuple[str, ...] | None
    queues: tuple[str, ...] | None
    priority_classes: tuple[str, ...] | None
    max_total_gpus: int | None = None

    @classmethod
    def from_arguments(
        cls,
        *,
        pod_security: Any,
        allowed_images: Any,
        allowed_namespaces: Any,
        service_account: str | None,
        allowed_service_accounts: Any,
        allowed_secrets: Any,
        provider_secrets: frozenset[str],
        allowed_schedulers: Any,
        allowed_queues: Any,
        allowed_priority_classes: Any,
        max_total_gpus: Any = None,
    ) -> Policy:
        """``render_job``'s arguments, checked; ``provider_secrets`` are the Secrets the
        provider's own env reads (the run's key), allowed whatever ``allowed_secrets`` says."""
        secrets = allow_lists.as_allow_list(allowed_secrets, "allowed_secrets") or ()
        return cls(
            level=check_level(pod_security),
            images=allow_lists.as_allow_list(allowed_images, "allowed_images"),
            namespaces=allow_lists.as_allow_list(allowed_namespaces, "allowed_namespaces"),
            service_accounts=_allowed_service_accounts(service_account, allowed_service_accounts),
            secrets=frozenset(secrets) | provider_secrets,
            schedulers=allow_lists.as_allow_list(allowed_schedulers, "allowed_schedulers"),
            queues=allow_lists.as_allow_list(allowed_queues, "allowed_queues"),
            priority_classes=allow_lists.as_allow_list(
                allowed_priority_classes, "allowed_priority_classes"
            ),
            max_total_gpus=_gpu_cap(max_total_gpus),
        )

    def problems(
        self, job: dict[str, Any], tasks: list[dict[str, Any]], namespace_source: str
    ) -> Problems:
        """Every field of the rendered job this policy refuses, with its JSON path."""
        problems: Problems = []
        for i, task in enumerate(tasks):
            template = task.get("template")
            if isinstance(template, dict):
                problems += pod_violations(template, ("spec", "tasks", i, "template"), self.level)
        if self.images is not None:
            problems += allow_lists.image_problems(tasks, self.images)
        if self.namespaces is not None:
            namespace = job["metadata"].get("namespace")
            problems += allow_lists.namespace_problems(namespace, self.namespaces, namespace_source)
        problems += allow_lists.service_account_problems(tasks, self.service_accounts)
        problems += secret_refs.secret_problems(tasks, self.secrets)
        if self.schedulers is not None:
            problems += allow_lists.scheduler_problems(job, tasks, self.schedulers)
        if self.queues is not None:
            problems += allow_lists.queue_problems(job, self.queues)
        if self.priority_classes is not None:
            problems += allow_lists.priority_class_problems(job, tasks, self.priority_classes)
        if self.max_total_gpus is not None:
            problems += gpus.gpu_budget_problems(tasks, self.max_total_gpus)
        return problems


def _gpu_cap(value: Any) -> int | None:
    """``max_total_gpus``: ``None``, or a count of GPUs (a digit string from a form too)."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if type(value) is not int or value < 0:
        raise error_at(("max_total_gpus",), f"must be a whole number of GPUs, not {show(value)}")
    return value

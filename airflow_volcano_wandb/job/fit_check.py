"""Will it fit? Read the job's Volcano queue and the nodes, then judge (``job.fit``).

Run right before a job is created: a job that can never be placed fails here with
``JobWontFitError`` instead of pending until ``pending_timeout``. Where a namespaced Role may
not read the cluster-scoped queues and nodes, the check says once that it was skipped, and
the submission goes on (``docker/k8s/rbac-fit-check.yaml`` grants the two reads).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from airflow_volcano_wandb.exceptions import JobWontFitError
from airflow_volcano_wandb.hooks.kubernetes_api import (
    FIT_CHECK_CLUSTER_ROLE,
    KubernetesPermissionError,
    api_message,
)
from airflow_volcano_wandb.job import fit

if TYPE_CHECKING:  # the Kubernetes client loads at run time, not when a DAG file is parsed
    from airflow_volcano_wandb.hooks.volcano import VolcanoHook

DEFAULT_QUEUE = "default"  # what Volcano's admission puts in a job that names no queue


def _read(read: Callable[[], Any], what: str, unread: list[str]) -> Any:
    """``read()``, or ``None`` (noting why in ``unread``) when the API refuses it."""
    from kubernetes.client.rest import ApiException

    try:
        return read()
    except KubernetesPermissionError:
        unread.append(f"{what}: not allowed to this connection")
    except ApiException as exc:  # e.g. no Volcano queue API here; the create will say more
        unread.append(f"{what}: HTTP {exc.status} {api_message(exc)}")
    return None


def check_fit(
    hook: VolcanoHook, body: Mapping[str, Any], mode: str, task_log: logging.Logger | Any
) -> None:
    """Judge ``body`` against its queue and the nodes, as ``mode`` (``fit.FIT_CHECK_MODES``)
    says: raise ``JobWontFitError`` (``fail``) or log (``warn``) when it can never be
    placed; log when it must wait; ``off`` reads nothing."""
    if mode == "off":
        return
    queue_name = (body.get("spec") or {}).get("queue") or DEFAULT_QUEUE
    unread: list[str] = []
    queue = _read(lambda: hook.get_queue(queue_name), f"queue '{queue_name}'", unread)
    nodes = _read(hook.list_nodes, "nodes", unread)
    if unread:
        task_log.info(
            "Fit check: skipped what it could not read (%s); grant the optional ClusterRole "
            "of %s for it",
            "; ".join(unread),
            FIT_CHECK_CLUSTER_ROLE,
        )
    verdict = fit.verdict(body, queue, nodes)
    if verdict.never:
        reasons = "; ".join(verdict.never)
        if mode == "fail":
            raise JobWontFitError(
                f"The job can never be placed: {reasons}. Nothing was submitted (fit_check="
                "'warn' only logs this, e.g. where an autoscaler adds nodes)."
            )
        task_log.warning("Fit check: the job can never be placed as things stand: %s", reasons)
    if verdict.later:
        task_log.info("Fit check: the job fits, but not now: %s", "; ".join(verdict.later))

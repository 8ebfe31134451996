"""``python -m airflow_volcano_wandb doctor``: is this cluster and these connections ready?

Checks everything the provider relies on (Volcano's CRDs, webhooks, release and queue; the
connection's permissions against ``docker/k8s/rbac.yaml``, or ``rbac-external-key-secret.yaml``
with ``--external-key-secret``; the W&B key; the Airflow components that need the provider).
The checks are pure functions over objects fetched once (``doctor_reads.fetch``); only that
module and :func:`main` do I/O, so every verdict and hint is unit-tested without a cluster.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from airflow_volcano_wandb.cli.permissions import (
    EXTERNAL_KEY_SECRET_PERMISSIONS,
    FIT_CHECK_PERMISSIONS,
    REQUIRED_PERMISSIONS,
    SECRET_PERMISSIONS,
    Permission,
)
from airflow_volcano_wandb.cli.report import FAIL, OK, WARN, Result, exit_code
from airflow_volcano_wandb.cli.setup_checks import check_components, check_wandb_key
from airflow_volcano_wandb.cli.volcano_checks import (
    check_apis,
    check_queue,
    check_volcano_version,
    check_webhooks,
)
from airflow_volcano_wandb.hooks.kubernetes_api import FIT_CHECK_CLUSTER_ROLE
from airflow_volcano_wandb.wandb.wandb_run import effective_mode

if TYPE_CHECKING:
    from airflow_volcano_wandb.cli.doctor_reads import Observed


def check_namespace(namespace: str, exists: bool | None) -> Result:
    """``exists`` is ``None`` when this identity may not read namespaces (cluster-scoped)."""
    title = f"namespace {namespace!r}"
    if exists is None:
        # A namespaced Role cannot read its own Namespace object; the RBAC check below shows
        # the namespace is usable.
        return Result(title, OK, "not readable by this identity (expected for a namespaced Role)")
    if not exists:
        return Result(
            title,
            FAIL,
            "does not exist: every submission would fail",
            f"kubectl create namespace {namespace} (or docker/k8s/namespace.yaml), or pass "
            f"--namespace",
        )
    return Result(title, OK, "exists")


def service_account_of(identity: str | None) -> tuple[str, str] | None:
    """``(namespace, name)`` of a pod's service account user name, else ``None``."""
    parts = (identity or "").split(":")
    if len(parts) == 4 and parts[:2] == ["system", "serviceaccount"]:
        return parts[2], parts[3]
    return None


def check_identity(identity: str | None) -> Result:
    """Who the connection acts as: whom the RoleBinding must name."""
    title = "identity"
    if not identity:
        return Result(title, WARN, "the apiserver did not say (SelfSubjectReview unavailable)")
    account = service_account_of(identity)
    if account:
        return Result(title, OK, f"service account {account[1]!r} of namespace {account[0]!r}")
    return Result(title, OK, identity)


def check_permissions(
    allowed: Mapping[Permission, bool],
    namespace: str,
    external_key_secret: bool = False,
    identity: str | None = None,
) -> Result:
    """``allowed``: the SelfSubjectAccessReview verdict for each permission asked about.

    :param allowed: verdicts for at least the permissions of the Role being checked.
    :param namespace: where jobs run.
    :param external_key_secret: check ``rbac-external-key-secret.yaml``'s Role (no Secret
        access, for DAGs that pass ``wandb_api_key_secret``) instead of ``rbac.yaml``'s; a
        Secret permission that is granted all the same is a warning: it is not needed.
    """
    title = f"RBAC in namespace {namespace!r}"
    manifest = "rbac-external-key-secret.yaml" if external_key_secret else "rbac.yaml"
    required = EXTERNAL_KEY_SECRET_PERMISSIONS if external_key_secret else REQUIRED_PERMISSIONS
    denied = [str(p) for p in required if not allowed.get(p, False)]
    if denied:
        account = service_account_of(identity)
        whom = (
            f"a subject kind ServiceAccount, name {account[1]!r}, namespace {account[0]!r} (the "
            "Helm chart's worker and triggerer accounts: rbac-helm-binding.example.yaml)"
            if account
            else (identity or "this identity")
        )
        return Result(
            title,
            FAIL,
            f"denied {len(denied)} of {len(required)}: " + ", ".join(denied),
            f"apply docker/k8s/{manifest} to {namespace!r} and bind its Role to {whom}",
        )
    if external_key_secret:
        unneeded = [str(p) for p in SECRET_PERMISSIONS if allowed.get(p, False)]
        if unneeded:
            return Result(
                title,
                WARN,
                f"all {len(required)} permissions of {manifest} granted, and also "
                + ", ".join(unneeded)
                + ": not needed when every DAG passes wandb_api_key_secret",
                f"bind docker/k8s/{manifest}'s Role instead of rbac.yaml's",
            )
    return Result(title, OK, f"all {len(required)} permissions of {manifest} granted")


def check_fit_check(allowed: Mapping[Permission, bool]) -> Result:
    """The fit check's optional cluster-wide reads (``docker/k8s/rbac-fit-check.yaml``)."""
    title = "fit check (optional)"
    missing = [str(p) for p in FIT_CHECK_PERMISSIONS if not allowed.get(p)]
    if missing:
        return Result(
            title,
            WARN,
            f"may not {', '.join(missing)} (cluster-wide): each task says the fit check was "
            "skipped, and a job that can never be placed waits for pending_timeout",
            f"kubectl apply -f {FIT_CHECK_CLUSTER_ROLE} (edit its binding's subject first)",
        )
    return Result(
        title,
        OK,
        "queues and nodes are readable: a job that can never be placed "
        "fails before it is submitted",
    )


def check_wandb(
    conn_id: str,
    exists: bool,
    has_api_key: bool,
    offline: bool,
    answer: tuple[bool | None, str] | None = None,
) -> Result:
    """The W&B connection; ``offline`` is ``WANDB_MODE`` being ``offline``/``disabled`` here
    (every task's default ``wandb_mode``: ``wandb_run.effective_mode``); ``answer`` is what W&B
    said of the key (``None``: not asked)."""
    title = f"W&B connection {conn_id!r}"
    if has_api_key and offline:
        return Result(title, OK, "has an API key, unused: WANDB_MODE is offline here")
    if has_api_key:
        return check_wandb_key(conn_id, *answer) if answer else Result(title, OK, "has an API key")
    if offline:
        return Result(
            title,
            OK,
            "no API key, fine: WANDB_MODE is offline here, so tasks without wandb_mode run offline",
        )
    if not exists:
        return Result(
            title,
            WARN,
            "not defined: runs must use WANDB_MODE=offline (or wandb_mode='offline')",
            f"to log to W&B, create {conn_id!r} (type wandb) with the API key as password",
        )
    return Result(
        title,
        FAIL,
        "defined but has no API key: online runs cannot authenticate",
        "put the API key in the connection's password, or run with WANDB_MODE=offline",
    )


def unreachable(conn_id: str, error: Exception) -> Result:
    """The cluster could not be asked at all: no other check can run."""
    return Result(
        f"Kubernetes connection {conn_id!r}",
        FAIL,
        f"cannot query the API server: {type(error).__name__}: {error}".splitlines()[0],
        "check the connection's kubeconfig, context or in-cluster setting and that the API "
        "server is reachable from here",
    )


def evaluate(
    observed: Observed,
    queue: str,
    wandb_conn_id: str,
    offline: bool,
    external_key_secret: bool = False,
) -> list[Result]:
    """Every check's verdict, in report order, on what :func:`fetch` ``observed``: ``queue``
    is the Volcano queue jobs go to, ``offline`` says ``WANDB_MODE`` is offline here, and
    ``external_key_secret`` judges RBAC against ``rbac-external-key-secret.yaml``."""
    return [
        check_components(observed.default_deferrable),
        check_apis(observed.served),
        check_webhooks(observed.mutating, observed.validating),
        check_volcano_version(
            observed.volcano_target, observed.volcano_deployments, observed.volcano_namespace
        ),
        check_queue(queue, observed.queue, observed.queue_readable),
        check_namespace(observed.namespace, observed.namespace_exists),
        check_identity(observed.identity),
        check_permissions(
            observed.allowed, observed.namespace, external_key_secret, observed.identity
        ),
        check_fit_check(observed.fit_check_allowed),
        check_wandb(
            wandb_conn_id,
            observed.wandb_exists,
            observed.wandb_has_key,
            offline,
            observed.wandb_answer,
        ),
    ]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--conn-id", default="kubernetes_default", help="Kubernetes connection")
    parser.add_argument(
        "--namespace",
        default=None,
        help="where jobs run (default: --template's metadata.namespace, else the seed "
        "template's, wandb)",
    )
    parser.add_argument(
        "--template",
        default=None,
        help="the DAGs' Volcano Job template file: its namespace is where jobs run (without "
        "one, the connection's, else default)",
    )
    parser.add_argument("--wandb-conn-id", default="wandb_default", help="W&B connection")
    parser.add_argument("--queue", default="default", help="the Volcano queue jobs go to")
    parser.add_argument(
        "--volcano-namespace",
        default="volcano-system",
        help="where Volcano is installed (its Deployments' image tag names its release)",
    )
    parser.add_argument(
        "--external-key-secret",
        action="store_true",
        help="the DAGs pass wandb_api_key_secret: check the narrower Role of "
        "docker/k8s/rbac-external-key-secret.yaml (no Secret access) instead of rbac.yaml's",
    )


def main(args: argparse.Namespace) -> int:
    from airflow_volcano_wandb.cli.doctor_reads import fetch
    from airflow_volcano_wandb.template.load import load_template

    try:
        offline = effective_mode(None, os.environ) in ("offline", "disabled")
        template = load_template(args.template) if args.template else None
    except ValueError as err:  # a TemplateError is one too
        print(Result("settings", FAIL, str(err), "fix WANDB_MODE or --template").line())
        return 1
    try:
        observed = fetch(args, template, ask_wandb_key=not offline)
    except Exception as err:  # any failure to reach the cluster is the report, not a traceback
        print(unreachable(args.conn_id, err).line())
        return 1
    results = evaluate(observed, args.queue, args.wandb_conn_id, offline, args.external_key_secret)
    print(
        f"doctor: connection {args.conn_id!r}, namespace {observed.namespace!r} "
        f"({observed.namespace_source})"
    )
    for result in results:
        print(result.line())
    code = exit_code(results)
    print("doctor: " + ("all checks passed" if code == 0 else "some checks FAILED"))
    return code

"""What ``doctor`` reads from the cluster and Airflow, as the connection's identity.

The I/O half of ``doctor``: :func:`fetch` reads everything once into :class:`Observed`. W&B is
asked whether the key works with the SDK's own first question (GraphQL ``viewer``, basic auth
as user ``api``), within :data:`WANDB_TIMEOUT` seconds; nothing it says carries the key.
"""

from __future__ import annotations

import argparse
import base64
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_volcano_wandb.cli.permissions import (
    FIT_CHECK_PERMISSIONS,
    REQUIRED_APIS,
    REQUIRED_PERMISSIONS,
    Permission,
)
from airflow_volcano_wandb.wandb.deadline import call_within
from airflow_volcano_wandb.wandb.key_forms import WANDB_BASIC_AUTH_USER, key_forms
from airflow_volcano_wandb.wandb.wandb_urls import DEFAULT_BASE_URL


@dataclass
class Observed:
    """Everything the checks look at, fetched from the cluster and Airflow."""

    namespace: str
    served: dict[str, list[str]]
    mutating: list[dict[str, Any]] | None
    validating: list[dict[str, Any]] | None
    queue: dict[str, Any] | None
    queue_readable: bool
    namespace_exists: bool | None
    allowed: dict[Permission, bool]
    wandb_exists: bool
    wandb_has_key: bool
    #: ``[volcano_wandb] volcano_version``: the release jobs are rendered for.
    volcano_target: str
    #: Where Volcano is installed, and its Deployments (``None``: this identity may not list
    #: them).
    volcano_namespace: str
    volcano_deployments: list[dict[str, Any]] | None
    #: Who the connection acts as (``system:serviceaccount:<ns>:<name>`` for a pod's), if
    #: the apiserver would say.
    identity: str | None = None
    #: The optional cluster-wide reads of the fit check (queues, nodes).
    fit_check_allowed: dict[Permission, bool] = field(default_factory=dict)
    #: What W&B said of the key: (accepted, what it said); ``None``: not asked.
    wandb_answer: tuple[bool | None, str] | None = None
    #: Where :attr:`namespace` came from (``setup_checks.jobs_namespace``).
    namespace_source: str = ""
    #: ``[operators] default_deferrable``: whether every task needs the triggerer.
    default_deferrable: bool = False


#: Seconds W&B has to answer whether the key works.
WANDB_TIMEOUT = 15
_VIEWER = "query Viewer { viewer { id entity username } }"


def _without_key(text: str, api_key: str) -> str:
    for form in key_forms(api_key):
        text = text.replace(form, "***")
    return text


def _viewer(base_url: str, api_key: str, timeout: float) -> tuple[bool | None, str]:
    """Ask W&B who the key belongs to: accepted with the entity, refused (401/403, or no
    viewer), or ``None`` when no answer came."""
    credentials = base64.b64encode(f"{WANDB_BASIC_AUTH_USER}:{api_key}".encode()).decode()
    request = urllib.request.Request(
        f"{base_url.rstrip('/')}/graphql",
        data=json.dumps({"query": _VIEWER}).encode(),
        headers={"Authorization": f"Basic {credentials}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            viewer = (json.load(response).get("data") or {}).get("viewer")
    except urllib.error.HTTPError as err:
        works = False if err.code in (401, 403) else None  # refused, else no answer
        return works, f"{base_url} answered HTTP {err.code}"
    except (OSError, ValueError) as err:  # unreachable, timed out, not JSON
        return None, f"{base_url}: {type(err).__name__}: {err}"
    if not viewer:
        return False, f"{base_url} knows no user for it"
    return True, f"{base_url}, entity {viewer.get('entity') or viewer.get('username')!r}"


def ask_wandb(
    base_url: str | None, api_key: str, timeout: float = WANDB_TIMEOUT
) -> tuple[bool | None, str]:
    """Whether W&B accepts ``api_key`` (``None``: no answer within ``timeout`` seconds, name
    resolution included); what it said, never the key."""
    url = base_url or DEFAULT_BASE_URL
    try:
        works, said = call_within(timeout, _viewer, url, api_key, timeout)
    except TimeoutError:
        works, said = None, f"{url} gave no answer within {timeout:g} s"
    return works, _without_key(said.splitlines()[0] if said else said, api_key)


def _get(api: Any, path: str) -> dict[str, Any] | None:
    """GET a path as JSON; ``None`` on 404 (403 and anything else raise)."""
    from kubernetes.client.exceptions import ApiException

    try:
        return api.call_api(
            path,
            "GET",
            response_types_map={200: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=15,
        )
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _served(api: Any) -> dict[str, list[str]]:
    return {
        gv: [r["name"] for r in (_get(api, f"/apis/{gv}") or {}).get("resources", [])]
        for gv in {gv for gv, _ in REQUIRED_APIS}
    }


def _readable(api: Any, path: str) -> tuple[dict[str, Any] | None, bool]:
    """What :func:`_get` reads, and False (with ``None``) when this identity may not read it."""
    from kubernetes.client.exceptions import ApiException

    try:
        return _get(api, path), True
    except ApiException as err:
        if err.status in (401, 403):
            return None, False
        raise


def _listed(api: Any, path: str) -> list[dict[str, Any]] | None:
    """The items listed at ``path``; ``None`` when this identity may not list them."""
    listing, readable = _readable(api, path)
    return (listing or {}).get("items", []) if readable else None


def _webhooks(api: Any, kind: str) -> list[dict[str, Any]] | None:
    return _listed(api, f"/apis/admissionregistration.k8s.io/v1/{kind}webhookconfigurations")


def _namespace_exists(api: Any, namespace: str) -> bool | None:
    found, readable = _readable(api, f"/api/v1/namespaces/{namespace}")
    return found is not None if readable else None


def _allowed(
    api: Any, namespace: str | None, permissions: tuple[Permission, ...] = REQUIRED_PERMISSIONS
) -> dict[Permission, bool]:
    """Whether the identity holds each permission, in ``namespace`` (``None``: cluster-wide)."""
    from kubernetes import client

    authz = client.AuthorizationV1Api(api)
    allowed = {}
    for permission in permissions:
        review = client.V1SelfSubjectAccessReview(
            spec=client.V1SelfSubjectAccessReviewSpec(
                resource_attributes=client.V1ResourceAttributes(
                    namespace=namespace,
                    group=permission.group,
                    resource=permission.resource,
                    subresource=permission.subresource or None,
                    verb=permission.verb,
                )
            )
        )
        allowed[permission] = bool(authz.create_self_subject_access_review(review).status.allowed)
    return allowed


def _identity(api: Any) -> str | None:
    """The connection's user name, from a SelfSubjectReview (any identity may ask)."""
    from kubernetes import client

    try:
        review = client.AuthenticationV1Api(api).create_self_subject_review(
            client.V1SelfSubjectReview()
        )
    except Exception:  # an older apiserver, or none: the other checks still say enough
        return None
    return review.status.user_info.username if review.status and review.status.user_info else None


def fetch(
    args: argparse.Namespace, template: Mapping[str, Any] | None, ask_wandb_key: bool
) -> Observed:
    """Read what the checks need, as the connection's identity (``args``: the command line).

    :param template: the DAGs' template (``--template``), loaded; ``None``: the seed.
    :param ask_wandb_key: ask W&B whether the connection's key works (not for offline runs).
    """
    from airflow.providers.cncf.kubernetes.hooks.kubernetes import KubernetesHook

    from airflow_volcano_wandb.airflow_compat import conf
    from airflow_volcano_wandb.cli.setup_checks import jobs_namespace
    from airflow_volcano_wandb.hooks.wandb import WandbHook
    from airflow_volcano_wandb.job.volcano_target import configured_volcano_version

    hook = KubernetesHook(conn_id=args.conn_id)
    namespace, source = jobs_namespace(args.namespace, template, hook.get_namespace())
    wandb = WandbHook(args.wandb_conn_id)
    key = wandb.api_key
    answer = ask_wandb(wandb.base_url, key) if key and ask_wandb_key else None
    queue, volcano_namespace = args.queue, args.volcano_namespace
    with hook.get_conn() as api:
        queue_object, queue_readable = _readable(
            api, f"/apis/scheduling.volcano.sh/v1beta1/queues/{queue}"
        )
        return Observed(
            namespace=namespace,
            served=_served(api),
            mutating=_webhooks(api, "mutating"),
            validating=_webhooks(api, "validating"),
            queue=queue_object,
            queue_readable=queue_readable,
            namespace_exists=_namespace_exists(api, namespace),
            allowed=_allowed(api, namespace),
            wandb_exists=wandb.connection is not None,
            wandb_has_key=key is not None,
            wandb_answer=answer,
            namespace_source=source,
            default_deferrable=conf.getboolean("operators", "default_deferrable", fallback=False),
            volcano_target=configured_volcano_version(),
            volcano_namespace=volcano_namespace,
            volcano_deployments=_listed(
                api, f"/apis/apps/v1/namespaces/{volcano_namespace}/deployments"
            ),
            identity=_identity(api),
            fit_check_allowed=_allowed(api, None, FIT_CHECK_PERMISSIONS),
        )

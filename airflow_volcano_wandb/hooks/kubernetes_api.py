"""Talking to the Kubernetes API: the Volcano resource names, call timeouts, the retry
policy, and errors that say what went wrong. Shared by the sync and the async hook."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

import tenacity

from airflow_volcano_wandb.hooks.volcano_requests import (  # noqa: F401 (their names here too)
    GROUP,
    JOBS_RESOURCE,
    PODGROUP_GROUP,
    PODGROUP_VERSION,
    QUEUE_RESOURCE,
    VERSION,
)

if TYPE_CHECKING:
    from kubernetes import client as k8s

#: The optional read-only ClusterRole the fit check reads queues and nodes with.
FIT_CHECK_CLUSTER_ROLE = "docker/k8s/rbac-fit-check.yaml"
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Async calls get client-side timeouts: without one, a connection that silently dies (no RST,
# no FIN) would keep a trigger waiting forever, and so would a wait for one of a shared
# client's pooled connections that never frees (``connect`` bounds the wait and the connect).
CONNECTION_WAIT = 60  # hooks/volcano_async.py's ASYNC_CALL_TIMEOUT: aiohttp loads with it
# Sync calls too (connect, read): a create whose answer never comes is retried, and its 409
# reattaches, instead of holding the task until its execution_timeout. The apiserver itself
# gives up on a request after 60 s (--request-timeout).
SYNC_CALL_TIMEOUT = (30, 70)
# A throttling apiserver (429) or gateway (503) may say when to come back; wait at least
# that long, but never longer than this.
RETRY_AFTER_MAX = 30.0
RETRY_BUDGET = 2 * SYNC_CALL_TIMEOUT[1] + RETRY_AFTER_MAX
WATCH_READ_GRACE = 30

log = logging.getLogger(__name__)


class ApiError(Protocol):
    """What either Kubernetes client's ``ApiException`` carries: the apiserver's answer."""

    @property
    def status(self) -> int: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def body(self) -> str | bytes | None: ...
    @property
    def headers(self) -> Mapping[str, str] | None: ...


def _loaded(*classes: tuple[str, str]) -> tuple[Any, ...]:
    """The ``(module, class)`` of ``classes`` whose client this process has loaded (each
    caller names what they are). An error of a client never loaded cannot have been raised,
    and asking loads none: a DAG file imports this module, and neither Kubernetes client may
    load at parse time."""
    return tuple(getattr(sys.modules[m], name) for m, name in classes if m in sys.modules)


_ASYNC_API_ERROR = ("kubernetes_asyncio.client.exceptions", "ApiException")
_AIOHTTP_ERROR = ("aiohttp", "ClientError")  # aiohttp's disconnects are not OSErrors


def _api_errors() -> tuple[type[ApiError], ...]:
    """Either client's ``ApiException``."""
    return _loaded(("kubernetes.client.exceptions", "ApiException"), _ASYNC_API_ERROR)


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """The sync client's transport errors (urllib3's, once loaded) and ``ConnectionError``."""
    return (*_loaded(("urllib3.exceptions", "HTTPError")), ConnectionError)


class JobExistsError(Exception):
    """The API answered 409: a job of that name is already there."""


class SecretExistsError(Exception):
    """The API answered 409: a Secret of that name is already there.

    ``maybe_ours``: an earlier attempt of the same create may have made it (its answer lost).
    """

    def __init__(self, name: str, *, maybe_ours: bool = False) -> None:
        super().__init__(name)
        self.maybe_ours = maybe_ours


class KubernetesPermissionError(PermissionError):
    """The API answered 403; the message names the verb and resource the Role lacks."""


def is_transient(exc: BaseException) -> bool:
    """Whether the same call may well succeed if simply repeated (throttling, a blip).

    A refused permission is not, although ``PermissionError`` is an ``OSError``.
    """
    if isinstance(exc, PermissionError):
        return False
    if isinstance(exc, _api_errors()):
        return exc.status in RETRYABLE_STATUSES or exc.status == 0
    # aiohttp's disconnects (ServerDisconnectedError, ...) are not OSErrors.
    return isinstance(exc, (*unreachable_errors(), *_loaded(_AIOHTTP_ERROR), TimeoutError, OSError))


def retry_after_seconds(exc: BaseException | None) -> float:
    """The wait a 429/503 answer asked for (its Retry-After header), capped; else 0."""
    if not isinstance(exc, _api_errors()) or not exc.headers:
        return 0.0
    try:
        seconds = float(exc.headers.get("Retry-After", 0))
    except (TypeError, ValueError):  # an HTTP date, or garbage: fall back to our backoff
        return 0.0
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


_backoff = tenacity.wait_exponential(multiplier=0.5, max=8)


def _wait_before_retry(state: tenacity.RetryCallState) -> float:
    exc = state.outcome.exception() if state.outcome else None
    return max(_backoff(state), retry_after_seconds(exc))


def _log_retry(state: tenacity.RetryCallState) -> None:
    exc = state.outcome.exception() if state.outcome else None
    fn = getattr(state.fn, "__name__", "call")
    log.warning(
        "Kubernetes API call %s failed (%s); retry %d", fn, _short(exc), state.attempt_number
    )


def _short(exc: BaseException | None) -> str:
    if isinstance(exc, _api_errors()):
        return f"HTTP {exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


# Every call here is safe to repeat: reads, deletes, and creates whose 409 is handled by the
# caller as "already there" (reattach), so a create whose answer was lost is not duplicated.
api_retry = tenacity.retry(
    retry=tenacity.retry_if_exception(is_transient),
    wait=_wait_before_retry,
    # The budget holds a whole read timeout plus a retry: a slow create is retried (its 409
    # then reattaches), not given up after its first attempt.
    stop=tenacity.stop_after_attempt(6) | tenacity.stop_after_delay(RETRY_BUDGET),
    before_sleep=_log_retry,
    reraise=True,
)


def permission_error(exc: BaseException, verb: str, resource: str, namespace: str) -> BaseException:
    """Turn a 403 into an error that says exactly which permission is missing.

    ``namespace`` is ``""`` for a cluster-scoped resource (nodes, Volcano queues), which only
    a ClusterRole can grant.
    """
    if isinstance(exc, _api_errors()) and exc.status == 403:
        where, grant = (
            (
                f"in namespace '{namespace}'",
                "the Role bound to this connection's identity (see docker/k8s/rbac.yaml)",
            )
            if namespace
            else (
                "cluster-wide",
                f"a ClusterRole bound to this connection's identity (see {FIT_CHECK_CLUSTER_ROLE})",
            )
        )
        return KubernetesPermissionError(
            f"Kubernetes denied '{verb}' on '{resource}' {where}. Grant it in {grant}. "
            f"API said: {api_message(exc)}"
        )
    return exc


def api_message(exc: ApiError) -> str:
    """What the apiserver (or an admission webhook) said, without headers and body dump."""
    try:
        return str(json.loads(exc.body or "").get("message"))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def to_dict(api: k8s.ApiClient, obj: Any) -> dict:
    return api.sanitize_for_serialization(obj)


def describe_failure(
    exc: BaseException,
    verb: str,
    namespace: str,
    resource: str = JOBS_RESOURCE,
    resource_words: str = f"Volcano jobs ({JOBS_RESOURCE})",
) -> str:
    """What went wrong with a list or watch of the namespace's jobs (or another
    ``resource``), in words for a log."""
    what = f"{verb} of {resource_words} in namespace '{namespace}'"
    if isinstance(exc, _loaded(_ASYNC_API_ERROR)):
        if exc.status == 401:
            return (
                f"Kubernetes refused this connection's credentials (HTTP 401) on the {what}: "
                "the token or client certificate is invalid or has expired"
            )
        if exc.status == 403:
            return str(permission_error(exc, verb, resource, namespace))
        if exc.status == 404 and resource == JOBS_RESOURCE:
            return (
                f"The Volcano Job CRD ({JOBS_RESOURCE}, {VERSION}) is not served by this "
                f"cluster (HTTP 404 on the {what}): is Volcano installed?"
            )
        if exc.status == 410:
            return f"The {what} expired between pages (HTTP 410); listing again from the start"
        if exc.status == 429:
            return f"Kubernetes throttled the {what} (HTTP 429): {api_message(exc)}"
        return f"The {what} failed with HTTP {exc.status}: {api_message(exc)}"
    config_errors = _loaded(("kubernetes_asyncio.config.config_exception", "ConfigException"))
    if isinstance(exc, (*config_errors, FileNotFoundError)):
        return f"Could not load the Kubernetes configuration for the {what}: {exc}"
    if isinstance(exc, TimeoutError):
        return f"The Kubernetes API did not answer the {what} in time"
    if isinstance(exc, (*_loaded(_AIOHTTP_ERROR), OSError)):
        return f"Could not reach the Kubernetes API for the {what} ({type(exc).__name__}: {exc})"
    return f"The {what} failed ({type(exc).__name__}: {exc})"

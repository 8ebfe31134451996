"""Volcano jobs through the cncf.kubernetes provider's connection handling.

``VolcanoHook`` (sync) and ``AsyncVolcanoHook`` (for triggers) subclass the provider's
``KubernetesHook`` and ``AsyncKubernetesHook``, so a ``kubernetes`` connection means the same
thing here as everywhere else in Airflow: in-cluster, kubeconfig path or content, context,
namespace. Objects come back as plain camelCase dicts, which the pure modules read.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Mapping
from functools import cached_property
from typing import Any

import aiohttp
import tenacity
from airflow.providers.cncf.kubernetes.hooks.kubernetes import (
    AsyncKubernetesHook,
    KubernetesHook,
)
from kubernetes import client as k8s
from kubernetes.client.rest import ApiException
from kubernetes_asyncio import client as async_k8s
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException
from urllib3.exceptions import HTTPError as Urllib3Error

from airflow_volcano_wandb.ownership import may_delete

GROUP = "batch.volcano.sh"
VERSION = "v1alpha1"
PLURAL = "jobs"
JOBS_RESOURCE = f"{PLURAL}.{GROUP}"  # as RBAC and error messages name it
PODGROUP_GROUP = "scheduling.volcano.sh"
PODGROUP_VERSION = "v1beta1"
JOB_NAME_LABEL = "volcano.sh/job-name"
RETRYABLE_STATUSES = frozenset({408, 429, 500, 502, 503, 504})
# Async calls get client-side timeouts: without one, a connection that silently dies (no RST,
# no FIN) would keep a trigger waiting forever.
ASYNC_CALL_TIMEOUT = aiohttp.ClientTimeout(sock_connect=30, sock_read=60)
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


class JobExistsError(Exception):
    """The API answered 409: a job of that name is already there."""


class SecretExistsError(Exception):
    """The API answered 409: a Secret of that name is already there."""


class KubernetesPermissionError(PermissionError):
    """The API answered 403; the message names the verb and resource the Role lacks."""


def is_transient(exc: BaseException) -> bool:
    """Whether the same call may well succeed if simply repeated (throttling, a blip).

    A refused permission is not, although ``PermissionError`` is an ``OSError``.
    """
    if isinstance(exc, PermissionError):
        return False
    if isinstance(exc, ApiException | AsyncApiException):
        return exc.status in RETRYABLE_STATUSES or exc.status == 0
    # aiohttp's disconnects (ServerDisconnectedError, ...) are not OSErrors.
    return isinstance(
        exc, Urllib3Error | aiohttp.ClientError | ConnectionError | TimeoutError | OSError
    )


def retry_after_seconds(exc: BaseException | None) -> float:
    """The wait a 429/503 answer asked for (its Retry-After header), capped; else 0."""
    if not isinstance(exc, ApiException | AsyncApiException) or not exc.headers:
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
    if isinstance(exc, ApiException | AsyncApiException):
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


def permission_error(exc: Exception, verb: str, resource: str, namespace: str) -> Exception:
    """Turn a 403 into an error that says exactly which permission is missing."""
    if isinstance(exc, ApiException | AsyncApiException) and exc.status == 403:
        return KubernetesPermissionError(
            f"Kubernetes denied '{verb}' on '{resource}' in namespace '{namespace}'. "
            f"Grant it in the Role bound to this connection's identity "
            f"(see docker/k8s/rbac.yaml). API said: {api_message(exc)}"
        )
    return exc


def api_message(exc: ApiException | AsyncApiException) -> str:
    """What the apiserver (or an admission webhook) said, without headers and body dump."""
    try:
        return str(json.loads(exc.body).get("message"))
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason)


def _json_pointer(key: str) -> str:
    """An annotation key as one JSON-pointer segment (RFC 6901: ``~`` and ``/`` escaped)."""
    return key.replace("~", "~0").replace("/", "~1")


def _to_dict(api: k8s.ApiClient, obj: Any) -> dict:
    return api.sanitize_for_serialization(obj)


class VolcanoConnectionMixin:
    """How an operator or sensor reaches the cluster: the connection and its overrides.

    The same four values build the sync hook here and the trigger's async hook in the
    triggerer, so both ends always talk to the same cluster as the same identity.
    """

    kubernetes_conn_id: str | None
    config_file: str | None
    cluster_context: str | None
    in_cluster: bool | None

    def connection_kwargs(self) -> dict[str, Any]:
        return {
            "kubernetes_conn_id": self.kubernetes_conn_id,
            "config_file": self.config_file,
            "cluster_context": self.cluster_context,
            "in_cluster": self.in_cluster,
        }

    @cached_property
    def hook(self) -> VolcanoHook:
        # One hook per task run: its connection lookup and API clients are reused by every
        # call and every poke instead of being rebuilt each time.
        return VolcanoHook(**self.connection_kwargs())


class VolcanoHook(KubernetesHook):
    """Create, read, delete and inspect Volcano jobs (sync; used by operator and sensor)."""

    hook_name = "Volcano (Kubernetes)"

    def _call(self, verb: str, resource: str, namespace: str, fn, *args, **kwargs):
        kwargs.setdefault("_request_timeout", SYNC_CALL_TIMEOUT)
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise permission_error(exc, verb, resource, namespace) from exc

    @api_retry
    def create_job(self, body: Mapping[str, Any], namespace: str) -> dict:
        """Create a job; raise ``JobExistsError`` when one of that name exists."""
        try:
            return self._call(
                "create",
                "jobs.batch.volcano.sh",
                namespace,
                self.custom_object_client.create_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                body,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise JobExistsError(body["metadata"]["name"]) from exc
            raise

    @api_retry
    def get_job(self, name: str, namespace: str) -> dict | None:
        """The job, or ``None`` when it does not exist."""
        try:
            return self._call(
                "get",
                "jobs.batch.volcano.sh",
                namespace,
                self.custom_object_client.get_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    @api_retry
    def list_jobs(
        self, namespace: str, label_selector: str, limit: int | None = None
    ) -> list[dict]:
        """The jobs matching ``label_selector`` (at most ``limit``, when given)."""
        result = self._call(
            "list",
            "jobs.batch.volcano.sh",
            namespace,
            self.custom_object_client.list_namespaced_custom_object,
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=label_selector,
            **({"limit": limit} if limit else {}),
        )
        return list(result.get("items") or [])

    @api_retry
    def delete_job(
        self,
        name: str,
        namespace: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """Delete with foreground propagation, so the job is gone only once its pods are.

        With ``uid``, a job of the same name but another uid (a newer submission) is left
        alone; with ``resource_version``, a job changed since it was read is too. Returns
        False when there was nothing to delete (or a precondition failed).
        """
        preconditions = None
        if uid or resource_version:
            preconditions = k8s.V1Preconditions(uid=uid, resource_version=resource_version)
        body = k8s.V1DeleteOptions(propagation_policy="Foreground", preconditions=preconditions)
        try:
            self._call(
                "delete",
                "jobs.batch.volcano.sh",
                namespace,
                self.custom_object_client.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                body=body,
            )
            return True
        except ApiException as exc:
            if exc.status in (404, 409):  # gone already, or a different job by that name
                return False
            raise

    @api_retry
    def set_job_annotations(
        self, name: str, namespace: str, uid: str, annotations: Mapping[str, str]
    ) -> dict | None:
        """Set annotations on this submission of the job (a JSON patch that first tests the
        uid, so a job recreated under the name is never touched); the job as patched, or
        ``None`` when this submission is gone."""
        patch: list[dict[str, Any]] = [{"op": "test", "path": "/metadata/uid", "value": uid}]
        patch += [
            {"op": "add", "path": f"/metadata/annotations/{_json_pointer(key)}", "value": value}
            for key, value in annotations.items()
        ]
        try:
            return self._call(
                "patch",
                "jobs.batch.volcano.sh",
                namespace,
                self.custom_object_client.patch_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                name,
                patch,
                _content_type="application/json-patch+json",
            )
        except ApiException as exc:
            if exc.status in (404, 422):  # gone, or the uid test failed: another job now
                return None
            raise

    def delete_job_if_owned(
        self, job: Mapping[str, str], try_number: int | None, task_log: Any = log
    ) -> None:
        """Delete this submission unless a newer try adopted it; log, never raise.

        For cleanup paths (kills, timeouts): the job is read, judged by
        ``ownership.may_delete``, and deleted with the read's resourceVersion as a
        precondition, so an adoption in between makes the delete fail and the check repeat.
        """
        name, namespace = job["name"], job["namespace"]
        try:
            for _ in range(3):
                current = self.get_job(name, namespace)
                if not may_delete(current, job.get("uid"), try_number):
                    if current is not None:
                        task_log.info(
                            "Volcano job %s/%s is a newer try's; left alone", namespace, name
                        )
                    return
                version = current["metadata"].get("resourceVersion")
                if self.delete_job(name, namespace, uid=job.get("uid"), resource_version=version):
                    task_log.info("Deleted Volcano job %s/%s", namespace, name)
                    return
        except Exception:
            task_log.exception("Could not delete Volcano job %s/%s", namespace, name)

    def wait_job_gone(self, name: str, namespace: str, timeout: float = 120) -> None:
        """Block until the job object is gone (foreground deletion waits for its pods)."""
        deadline = time.monotonic() + timeout
        while self.get_job(name, namespace) is not None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"Volcano job {namespace}/{name} still exists after {timeout}s")
            time.sleep(0.5)

    @api_retry
    def list_job_pods(self, name: str, namespace: str) -> list[dict]:
        pods = self._call(
            "list",
            "pods",
            namespace,
            self.core_v1_client.list_namespaced_pod,
            namespace,
            label_selector=f"{JOB_NAME_LABEL}={name}",
        )
        return [_to_dict(self.api_client, pod) for pod in pods.items]

    @api_retry
    def read_pod_log(self, pod: str, namespace: str, tail_lines: int | None = None) -> str:
        try:
            # Raw bytes, decoded here: kubernetes 36 returns the repr of the bytes ("b'...'")
            # when it decodes a log itself (kubernetes-client/python#2596).
            response = self._call(
                "get",
                "pods/log",
                namespace,
                self.core_v1_client.read_namespaced_pod_log,
                pod,
                namespace,
                tail_lines=tail_lines,
                _preload_content=False,
            )
            return response.data.decode("utf-8", errors="replace")
        except ApiException as exc:
            if exc.status in (400, 404):  # container never started, or pod gone
                return ""
            raise

    @api_retry
    def list_events(self, namespace: str, names: set[str]) -> list[dict]:
        """Events about any of ``names`` (the job, its PodGroup and its pods)."""
        events = self._call(
            "list", "events", namespace, self.core_v1_client.list_namespaced_event, namespace
        )
        return [
            _to_dict(self.api_client, e)
            for e in events.items
            if e.involved_object is not None and e.involved_object.name in names
        ]

    @api_retry
    def list_podgroups(self, namespace: str, job_uid: str) -> list[dict]:
        """The PodGroups Volcano made for the job (owned by it)."""
        result = self._call(
            "list",
            "podgroups.scheduling.volcano.sh",
            namespace,
            self.custom_object_client.list_namespaced_custom_object,
            PODGROUP_GROUP,
            PODGROUP_VERSION,
            namespace,
            "podgroups",
        )
        return [
            pg
            for pg in result.get("items") or []
            if any(
                ref.get("uid") == job_uid
                for ref in (pg.get("metadata") or {}).get("ownerReferences") or []
            )
        ]

    @api_retry
    def create_secret(self, body: Mapping[str, Any], namespace: str) -> dict:
        """Create a Secret; raise ``SecretExistsError`` when one of that name exists."""
        try:
            created = self._call(
                "create",
                "secrets",
                namespace,
                self.core_v1_client.create_namespaced_secret,
                namespace,
                body,
            )
        except ApiException as exc:
            if exc.status == 409:
                raise SecretExistsError(body["metadata"]["name"]) from exc
            raise
        return _to_dict(self.api_client, created)

    @api_retry
    def get_secret_metadata(self, name: str, namespace: str) -> dict | None:
        """The Secret's metadata (never its data), or ``None`` when it does not exist."""
        try:
            secret = self._call(
                "get",
                "secrets",
                namespace,
                self.core_v1_client.read_namespaced_secret,
                name,
                namespace,
            )
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return _to_dict(self.api_client, secret.metadata)

    @api_retry
    def patch_secret(self, name: str, namespace: str, patch: Mapping[str, Any]) -> dict:
        """Patch the Secret (a strategic merge: e.g. new data and owners); its metadata back."""
        patched = self._call(
            "patch",
            "secrets",
            namespace,
            self.core_v1_client.patch_namespaced_secret,
            name,
            namespace,
            dict(patch),
        )
        return _to_dict(self.api_client, patched.metadata)


class AsyncVolcanoHook(AsyncKubernetesHook):
    """The async side, for triggers: read and delete jobs, and list+watch a namespace."""

    async def get_job(self, name: str, namespace: str) -> dict | None:
        """The job, over a client of its own; None if there is none of that name."""
        async with self.get_conn() as api:
            try:
                return await self.read_job(api, name, namespace)
            except AsyncApiException as exc:
                raise permission_error(exc, "get", JOBS_RESOURCE, namespace) from exc

    async def read_job(self, api: async_k8s.ApiClient, name: str, namespace: str) -> dict | None:
        """The job, over an open client (no new TLS session); None if there is none."""
        try:
            return await async_k8s.CustomObjectsApi(api).get_namespaced_custom_object(
                GROUP, VERSION, namespace, PLURAL, name, _request_timeout=ASYNC_CALL_TIMEOUT
            )
        except AsyncApiException as exc:
            if exc.status == 404:
                return None
            raise

    async def delete_job(
        self,
        name: str,
        namespace: str,
        uid: str | None = None,
        resource_version: str | None = None,
    ) -> bool:
        """As ``VolcanoHook.delete_job``: foreground, with uid/resourceVersion preconditions."""
        async with self.get_conn() as api:
            preconditions = None
            if uid or resource_version:
                preconditions = async_k8s.V1Preconditions(
                    uid=uid, resource_version=resource_version
                )
            body = async_k8s.V1DeleteOptions(
                propagation_policy="Foreground", preconditions=preconditions
            )
            try:
                await async_k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
                    GROUP,
                    VERSION,
                    namespace,
                    PLURAL,
                    name,
                    body=body,
                    _request_timeout=ASYNC_CALL_TIMEOUT,
                )
                return True
            except AsyncApiException as exc:
                if exc.status in (404, 409):
                    return False
                raise

    async def list_jobs_page(
        self,
        api: async_k8s.ApiClient,
        namespace: str,
        label_selector: str | None = None,
        limit: int = 500,
        continue_token: str | None = None,
    ) -> tuple[list[dict], str, str | None]:
        """One page of the namespace's jobs: (items, the list's resourceVersion, next token).

        The next token is None on the last page; the resourceVersion is the one to watch from
        once every page is in. A token too old for etcd answers 410: list again from the top.
        """
        result = await async_k8s.CustomObjectsApi(api).list_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            PLURAL,
            label_selector=label_selector,
            limit=limit,
            _continue=continue_token,
            _request_timeout=ASYNC_CALL_TIMEOUT,
        )
        metadata = result.get("metadata") or {}
        return (
            list(result.get("items") or []),
            metadata["resourceVersion"],
            metadata.get("continue") or None,
        )

    async def watch_jobs(
        self,
        api: async_k8s.ApiClient,
        namespace: str,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
    ) -> AsyncIterator[tuple[str, dict]]:
        """Watch events (type, object) from ``resource_version``; raw ERROR events included."""
        from kubernetes_asyncio import watch

        watcher = watch.Watch()
        try:
            async for event in watcher.stream(
                async_k8s.CustomObjectsApi(api).list_namespaced_custom_object,
                GROUP,
                VERSION,
                namespace,
                PLURAL,
                resource_version=resource_version,
                label_selector=label_selector,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                # The server ends the stream after timeout_seconds; silence well past that
                # means a dead connection (a dropped route, a lost NAT entry), which TCP
                # alone would never report: give up on it, so the watcher reconnects.
                _request_timeout=aiohttp.ClientTimeout(
                    sock_connect=30, sock_read=timeout_seconds + WATCH_READ_GRACE
                ),
            ):
                yield event["type"], event["raw_object"]
        finally:
            watcher.stop()

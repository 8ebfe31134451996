"""The async side of the Volcano hook, for triggers: read and delete jobs, list+watch jobs
and pods."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from airflow.providers.cncf.kubernetes.hooks.kubernetes import AsyncKubernetesHook
from kubernetes_asyncio import client as async_k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException as AsyncApiException

from airflow_volcano_wandb.hooks import volcano_requests
from airflow_volcano_wandb.hooks.kubernetes_api import (
    CONNECTION_WAIT,
    JOBS_RESOURCE,
    WATCH_READ_GRACE,
    permission_error,
)

ASYNC_CALL_TIMEOUT = aiohttp.ClientTimeout(connect=CONNECTION_WAIT, sock_connect=30, sock_read=60)


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
                *volcano_requests.job_args(namespace, name), _request_timeout=ASYNC_CALL_TIMEOUT
            )
        except AsyncApiException as exc:
            if exc.status in volcano_requests.ABSENT:
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
            try:
                await async_k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
                    *volcano_requests.job_args(namespace, name),
                    # The client sends a dict as it is; its stubs name only the model.
                    body=volcano_requests.delete_job_body(uid, resource_version),  # type: ignore[arg-type]
                    _request_timeout=ASYNC_CALL_TIMEOUT,
                )
                return True
            except AsyncApiException as exc:
                if exc.status in volcano_requests.NOT_DELETED:
                    return False
                raise

    async def annotate_job(
        self,
        api: async_k8s.ApiClient,
        job: dict,
        annotations: dict[str, str],
    ) -> bool:
        """Add ``annotations`` to this submission of ``job``; False when it is gone or another
        submission holds the name now (``volcano_requests.uid_tested_json_patch``)."""
        metadata = job["metadata"]
        try:
            await async_k8s.CustomObjectsApi(api).patch_namespaced_custom_object(
                *volcano_requests.job_args(metadata["namespace"], metadata["name"]),
                volcano_requests.uid_tested_json_patch(job, annotations),
                _request_timeout=ASYNC_CALL_TIMEOUT,
            )
        except AsyncApiException as exc:
            if exc.status in volcano_requests.NOT_PATCHED:
                return False
            raise permission_error(exc, "patch", JOBS_RESOURCE, metadata["namespace"]) from exc
        return True

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
            *volcano_requests.job_args(namespace),
            **_set(label_selector=label_selector, _continue=continue_token),
            limit=limit,
            _request_timeout=ASYNC_CALL_TIMEOUT,
        )
        return volcano_requests.list_page(result)

    async def list_job_pods(
        self, api: async_k8s.ApiClient, name: str, namespace: str
    ) -> list[dict]:
        """The job's pods, as the plain dicts the API returns."""
        response = await _unparsed(async_k8s.CoreV1Api(api).list_namespaced_pod)(
            namespace,
            label_selector=volcano_requests.job_pods_selector(name),
            _request_timeout=ASYNC_CALL_TIMEOUT,
        )
        async with response:
            return volcano_requests.items(await response.json())

    async def read_pod_log_since(
        self, api: async_k8s.ApiClient, pod: str, namespace: str, container: str, since: int
    ) -> str:
        """The first byte of a container's log of the last ``since`` seconds: ``""`` when it
        printed nothing then. Errors are raised: a pod that is gone printed nothing, but it
        is no silence either."""
        response = await _unparsed(async_k8s.CoreV1Api(api).read_namespaced_pod_log)(
            pod,
            namespace,
            **volcano_requests.log_since_query(container, since),
            _request_timeout=ASYNC_CALL_TIMEOUT,
        )
        async with response:
            return volcano_requests.log_text(await response.read())

    async def open_pod_log(
        self, api: async_k8s.ApiClient, pod: str, namespace: str, container: str
    ) -> aiohttp.ClientResponse:
        """A follow stream of a container's log, each line prefixed with its timestamp.

        No read timeout: a container may stay silent for hours; the caller decides how long
        silence may last (and closes the response).
        """
        return await _unparsed(async_k8s.CoreV1Api(api).read_namespaced_pod_log)(
            pod,
            namespace,
            container=container,
            follow=True,
            timestamps=True,
            _request_timeout=aiohttp.ClientTimeout(connect=CONNECTION_WAIT, sock_connect=30),
        )

    async def list_pods_page(
        self,
        api: async_k8s.ApiClient,
        namespace: str,
        label_selector: str | None = None,
        limit: int = 500,
        continue_token: str | None = None,
    ) -> tuple[list[dict], str, str | None]:
        """One page of the namespace's pods, as :meth:`list_jobs_page` pages jobs."""
        response = await _unparsed(async_k8s.CoreV1Api(api).list_namespaced_pod)(
            namespace,
            label_selector=label_selector,
            limit=limit,
            _continue=continue_token,
            _request_timeout=ASYNC_CALL_TIMEOUT,
        )
        async with response:
            return volcano_requests.list_page(await response.json())

    def watch_jobs(
        self,
        api: async_k8s.ApiClient,
        namespace: str,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
    ) -> AsyncIterator[tuple[str, dict]]:
        """Watch events (type, object) of jobs from ``resource_version``; raw ERROR events
        included."""
        return _watch(
            async_k8s.CustomObjectsApi(api).list_namespaced_custom_object,
            volcano_requests.job_args(namespace),
            resource_version,
            timeout_seconds,
            label_selector,
        )

    def watch_pods(
        self,
        api: async_k8s.ApiClient,
        namespace: str,
        resource_version: str,
        timeout_seconds: int = 300,
        label_selector: str | None = None,
    ) -> AsyncIterator[tuple[str, dict]]:
        """Watch events (type, object) of pods from ``resource_version``, as
        :meth:`watch_jobs`."""
        return _watch(
            async_k8s.CoreV1Api(api).list_namespaced_pod,
            (namespace,),
            resource_version,
            timeout_seconds,
            label_selector,
        )


def _set(**query: str | None) -> dict[str, Any]:
    """The query parameters that are set: the client leaves a ``None`` one out, but its stubs
    take none."""
    return {key: value for key, value in query.items() if value is not None}


def _unparsed(
    call: Callable[..., Awaitable[object]],
) -> Callable[..., Awaitable[aiohttp.ClientResponse]]:
    """``call`` answering with its raw aiohttp response (``_preload_content=False``), which
    the client's stubs, typed for the parsed answer only, do not say."""
    return functools.partial(call, _preload_content=False)  # type: ignore[return-value]


class _RawEventWatch(watch.Watch):
    """A watch whose events keep their object as sent (``raw_object``, a dict) and nothing
    more: the readers read only that, and building a ``V1Pod`` of each event as well costs
    about fifty times the event's parse (some 1 ms against 0.02 ms), on the triggerer's event
    loop, for every pod of a thousand jobs ending together."""

    def get_return_type(self, func: object) -> str | None:  # type: ignore[override]
        return None


async def _watch(
    list_call: Callable[..., Any],
    args: tuple[str, ...],
    resource_version: str,
    timeout_seconds: int,
    label_selector: str | None,
) -> AsyncIterator[tuple[str, dict]]:
    watcher = _RawEventWatch()
    try:
        async for event in watcher.stream(
            list_call,
            *args,
            resource_version=resource_version,
            label_selector=label_selector,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            # The server ends the stream after timeout_seconds; silence well past that means a
            # dead connection (a dropped route, a lost NAT entry), which TCP alone would never
            # report: give up on it, so the watcher reconnects.
            _request_timeout=aiohttp.ClientTimeout(
                connect=CONNECTION_WAIT,
                sock_connect=30,
                sock_read=timeout_seconds + WATCH_READ_GRACE,
            ),
        ):
            yield event["type"], event["raw_object"]
    finally:
        watcher.stop()

"""A watch's events reach the readers as the API sent them, without a model built of each.

kubernetes_asyncio builds a ``V1Pod`` of every pod event by default (about fifty times the
event's parse), which the readers never read. Here a real kubernetes_asyncio client reads a
watch stream from a real local server.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from kubernetes_asyncio import client as async_k8s

from airflow_volcano_wandb.hooks.volcano_async import AsyncVolcanoHook
from test_support.local_server import served


def pod(name: str, version: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "resourceVersion": version},
        "status": {"phase": "Running"},
    }


EVENTS = [
    {"type": "ADDED", "object": pod("j-master-0", "11")},
    {"type": "MODIFIED", "object": pod("j-master-0", "12")},
    {"type": "DELETED", "object": pod("j-master-0", "13")},
]


def test_pod_events_are_the_objects_as_sent_and_no_model_is_built(monkeypatch) -> None:
    built: list[object] = []
    original = async_k8s.V1Pod.__init__

    def counting_init(self, *args, **kwargs):
        built.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(async_k8s.V1Pod, "__init__", counting_init)

    async def scenario() -> list[tuple[str, dict]]:
        async def stream(request: web.Request) -> web.StreamResponse:
            assert request.query["watch"] == "True"
            response = web.StreamResponse()
            await response.prepare(request)
            for event in EVENTS:
                await response.write((json.dumps(event) + "\n").encode())
            await response.write_eof()
            return response

        app = web.Application()
        app.router.add_get("/api/v1/namespaces/ns/pods", stream)
        async with served(app) as base_url:
            config = async_k8s.Configuration(host=base_url)
            async with async_k8s.ApiClient(config) as api:
                hook = AsyncVolcanoHook(conn_id=None)
                return [e async for e in hook.watch_pods(api, "ns", "10", timeout_seconds=5)]

    events = asyncio.run(scenario())
    assert events == [(e["type"], e["object"]) for e in EVENTS]
    assert all(type(obj) is dict for _, obj in events)
    assert built == []

"""The Volcano hooks' requests, written once for the sync and the async client."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes import client as sync_client
from kubernetes_asyncio import client as async_client

from airflow_volcano_wandb.hooks import volcano_requests as requests


@pytest.mark.parametrize(
    ("uid", "resource_version"),
    [(None, None), ("u-1", None), (None, "7"), ("u-1", "7"), ("", "7")],
)
@pytest.mark.parametrize("client", [sync_client, async_client])
def test_the_delete_body_is_what_each_client_sends_for_its_delete_options(
    client, uid, resource_version
) -> None:
    """The plain body goes on the wire as the clients' ``V1DeleteOptions`` did."""
    preconditions = None
    if uid or resource_version:
        preconditions = client.V1Preconditions(uid=uid, resource_version=resource_version)
    options = client.V1DeleteOptions(propagation_policy="Foreground", preconditions=preconditions)
    body = requests.delete_job_body(uid, resource_version)
    assert asyncio.run(_on_the_wire(client, body)) == asyncio.run(_on_the_wire(client, options))


async def _on_the_wire(client, body):
    """The JSON a client makes of a body (the async client's needs a running loop)."""
    api = client.ApiClient()
    try:
        return api.sanitize_for_serialization(body)
    finally:
        closed = api.close()
        if closed is not None:
            await closed


def test_a_call_on_jobs_names_the_volcano_resource() -> None:
    assert requests.job_args("ns") == ("batch.volcano.sh", "v1alpha1", "ns", "jobs")
    assert requests.job_args("ns", "j")[-1] == "j"
    assert requests.job_pods_selector("j") == "volcano.sh/job-name=j"


def test_the_annotation_patches_guard_the_uid() -> None:
    assert requests.uid_guarded_merge_patch("u-1", {"a": "1"}) == {
        "metadata": {"uid": "u-1", "annotations": {"a": "1"}}
    }
    bare = {"metadata": {"uid": "u-1"}}
    assert requests.uid_tested_json_patch(bare, {"a/b": "1"}) == [
        {"op": "test", "path": "/metadata/uid", "value": "u-1"},
        {"op": "add", "path": "/metadata/annotations", "value": {"a/b": "1"}},
    ]
    annotated = {"metadata": {"uid": "u-1", "annotations": {"x": "y"}}}
    assert requests.uid_tested_json_patch(annotated, {"a/b~c": "1"})[1] == {
        "op": "add",
        "path": "/metadata/annotations/a~1b~0c",
        "value": "1",
    }


def test_answers_are_read_alike() -> None:
    page = {"metadata": {"resourceVersion": "9", "continue": ""}, "items": [{"a": 1}]}
    assert requests.list_page(page) == ([{"a": 1}], "9", None)
    assert requests.items({"items": None}) == []
    assert requests.log_text(b"\xff") == "\ufffd"
    groups = [
        {"metadata": {"ownerReferences": [{"uid": "u-1"}]}},
        {"metadata": {"ownerReferences": [{"uid": "other"}]}},
        {"metadata": None},
    ]
    assert requests.owned_by(groups, "u-1") == groups[:1]
    assert requests.log_since_query("c", 30) == {
        "container": "c",
        "since_seconds": 30,
        "limit_bytes": 1,
    }

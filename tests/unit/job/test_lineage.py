"""OpenLineage facets of a training step, serialised as the openlineage client sends them."""

from __future__ import annotations

import logging

import pytest
from openlineage.client.serde import Serde

from airflow_volcano_wandb.job.job_facts import JobFacts
from airflow_volcano_wandb.job.lineage import (
    ArtifactRef,
    operator_lineage,
    read_artifacts,
    wandb_namespace,
)

FACTS = JobFacts(
    "wandb-job-abc",
    "ml",
    "uid-1",
    {"master": "img:1", "worker": "img:1"},
    {"master": 1, "worker": 4},
    "master",
    {"master": 8, "worker": 32},  # 8 processes per pod under torchrun
)
RUN = {"wandb_run_id": "abc", "wandb_run_url": "https://wandb.ai/e/p/runs/abc"}


def test_facets_and_datasets() -> None:
    lineage = operator_lineage(
        FACTS,
        RUN,
        summary={"eval/accuracy": 0.9},
        entity="e",
        project="p",
        base_url=None,
        artifacts=(
            [ArtifactRef("e/data/shards:v3", "dataset")],
            [ArtifactRef("e/p/mlp:v0", "model")],
        ),
    )
    job = Serde.to_dict(lineage.job_facets["volcano_job"])
    assert {k: job[k] for k in ("namespace", "image", "replicas", "worldSize")} == {
        "namespace": "ml",
        "image": "img:1",
        "replicas": {"master": 1, "worker": 4},
        "worldSize": 40,
    }
    assert job["_producer"] and job["_schemaURL"]
    wandb = Serde.to_dict(lineage.run_facets["wandb_run"])
    assert (wandb["runId"], wandb["url"], wandb["summary"]) == (
        "abc",
        RUN["wandb_run_url"],
        {"eval/accuracy": 0.9},
    )
    assert Serde.to_dict(lineage.run_facets["volcano_job_run"])["uid"] == "uid-1"
    assert [(d.namespace, d.name) for d in lineage.inputs] == [
        ("wandb://api.wandb.ai", "e/data/shards:v3")
    ]
    assert [(d.namespace, d.name) for d in lineage.outputs] == [
        ("wandb://api.wandb.ai", "e/p/mlp:v0")
    ]


def test_a_failed_try_known_only_by_name_still_has_facets() -> None:
    lineage = operator_lineage(
        JobFacts("j", "n"), {}, summary=None, entity=None, project=None, base_url=None
    )
    assert Serde.to_dict(lineage.job_facets["volcano_job"])["worldSize"] == 0
    assert not lineage.inputs and not lineage.outputs


@pytest.mark.parametrize(
    ("base_url", "namespace"),
    [
        (None, "wandb://api.wandb.ai"),
        ("https://wandb.corp.example:8443", "wandb://wandb.corp.example:8443"),
    ],
)
def test_the_dataset_namespace_is_the_wandb_server(base_url, namespace) -> None:
    assert wandb_namespace(base_url) == namespace


class _Unreachable:
    def __init__(self) -> None:
        self.calls = 0

    def run_artifacts(self, run_id, *, entity, project):
        self.calls += 1
        raise ConnectionError("refused")


def test_artifacts_are_best_effort(caplog: pytest.LogCaptureFixture) -> None:
    hook, log = _Unreachable(), logging.getLogger("test.lineage")
    with caplog.at_level(logging.INFO, logger="test.lineage"):
        assert read_artifacts(
            hook, "abc", entity="e", project="p", mode="offline", has_key=True, log=log
        ) == ([], [])
        assert hook.calls == 0
        assert read_artifacts(
            hook, "abc", entity="e", project="p", mode=None, has_key=True, log=log
        ) == ([], [])
    assert hook.calls == 1
    assert "could not read run abc (ConnectionError: refused)" in caplog.text

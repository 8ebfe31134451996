"""What a training step publishes: the job's facts, the asset event's extra, the promotion rule."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from airflow_volcano_wandb.job.job_facts import JobFacts, asset_extra
from airflow_volcano_wandb.job.job_status import interpret
from test_support.template_cases import MACROS, render_job

REPO = Path(__file__).resolve().parents[3]
CHIEF = REPO / "tests" / "fixtures" / "templates" / "chief-replica-pytorch.yaml"
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"
RUN = {"wandb_run_id": "abc123", "wandb_run_url": "https://wandb.ai/e/p/runs/abc123"}


def test_facts_of_a_rendered_seed_job() -> None:
    job = render_job(SEED, macros=MACROS, replicas={"worker": 3})
    job["metadata"]["uid"] = "u-1"
    facts = JobFacts.from_job(job)
    assert (facts.name, facts.namespace, facts.uid) == (
        job["metadata"]["name"],
        job["metadata"]["namespace"],
        "u-1",
    )
    assert facts.replicas == {"master": 1, "worker": 3}
    assert facts.world_size == 4
    assert facts.image == MACROS["image_uri"] == facts.images["worker"]


def test_the_image_is_the_master_tasks_even_when_it_is_not_first() -> None:
    job = render_job(SEED, macros=MACROS)
    master, worker = job["spec"]["tasks"]
    job["spec"]["tasks"] = [worker, master]
    worker["template"]["spec"]["containers"][0]["image"] = "registry/worker:1"
    facts = JobFacts.from_job(job)
    assert facts.master_task == "master"
    assert facts.image == MACROS["image_uri"]
    assert list(facts.replicas) == ["worker", "master"]  # template order


def test_a_job_already_gone_gives_its_identity_alone() -> None:
    facts = JobFacts.from_job({"metadata": {"name": "j", "namespace": "n", "uid": "u"}})
    assert facts == JobFacts("j", "n", "u")
    assert facts.image is None and facts.world_size == 0


def test_asset_extra_is_json_safe_and_complete() -> None:
    facts = JobFacts.from_job(render_job(CHIEF, macros={**MACROS, "epochs": 1, "lr": 0.1}))
    extra = asset_extra(facts, RUN, {"eval/accuracy": 0.9})
    assert json.loads(json.dumps(extra)) == extra
    assert extra["wandb_run_id"] == "abc123"
    assert extra["wandb_run_url"] == RUN["wandb_run_url"]
    assert extra["wandb_summary"] == {"eval/accuracy": 0.9}
    assert extra["volcano_job"] == facts.name and extra["volcano_namespace"] == facts.namespace
    assert extra["replicas"] == dict(facts.replicas) and extra["image"] == facts.image


def test_asset_extra_without_a_summary_says_so_with_an_empty_dict() -> None:
    extra = asset_extra(JobFacts("j", "n"), {}, None)
    assert extra["wandb_summary"] == {} and extra["wandb_run_id"] is None


@pytest.fixture(scope="module")
def retraining():
    spec = importlib.util.spec_from_file_location(
        "retraining_dag", REPO / "dags" / "volcano_pytorch_retraining.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_promotion_only_on_improvement(retraining) -> None:
    extra = {**RUN, "wandb_summary": {"eval/accuracy": 0.91}, "image": "img:1"}
    first = retraining.promotion(extra, None)
    assert first == {**RUN, "accuracy": 0.91, "image": "img:1"}
    assert retraining.promotion(extra, first) is None  # equal does not beat
    better = {**extra, "wandb_summary": {"eval/accuracy": 0.95}}
    assert retraining.promotion(better, first)["accuracy"] == 0.95
    assert retraining.promotion({**extra, "wandb_summary": {}}, None) is None


def test_a_task_read_back_without_replicas_has_none_as_the_job_status_reads_it():
    """The API omits a zero count; the asset event and the wait must agree it is 0."""
    job = {
        "metadata": {"name": "j"},
        "spec": {"tasks": [{"name": "master", "replicas": 1}, {"name": "worker"}]},
    }
    assert JobFacts.from_job(job).replicas == {"master": 1, "worker": 0}
    assert interpret(job).replicas == {"master": 1, "worker": 0}


def test_asset_extra_names_the_intent_a_resumed_step_continued() -> None:
    assert asset_extra(JobFacts("j", "n"), {}, None)["resumed_from_intent"] is None
    resumed = asset_extra(JobFacts("j", "n"), {**RUN, "resumed_from_intent": 1}, None)
    assert resumed["resumed_from_intent"] == 1
    assert resumed["resumed_from_step"] is None
    assert resumed["resume_saved_gpu_seconds"] is None
    said = asset_extra(
        JobFacts("j", "n"),
        {**RUN, "resumed_from_step": 593, "resume_saved_gpu_seconds": 9876.5},
        None,
    )
    assert said["resumed_from_step"] == 593
    assert said["resume_saved_gpu_seconds"] == 9876.5


def test_asset_extra_of_an_elastic_job_carries_its_re_formations_and_gpu_hours() -> None:
    """Issue 51 goal 2: the range it ran under, the lost workers Volcano replaced (its
    retryCount) and the GPU-hours its ranks used; ``{}`` for a job that is not elastic."""
    job = {
        "metadata": {
            "name": "j",
            "namespace": "n",
            "annotations": {"airflow-volcano-wandb.io/elastic-workers": "2:4"},
        },
        "spec": {"tasks": [{"name": "master", "replicas": 1}, {"name": "worker", "replicas": 4}]},
        "status": {"retryCount": 3},
    }
    usage = {"master-0": 3600.0, "worker-0": 1800.0, "worker-1": 1800.0}
    extra = asset_extra(JobFacts.from_job(job), {}, None, usage)
    assert extra["elastic"] == {
        "min_workers": 2,
        "max_workers": 4,
        "reformations": 3,
        "gpu_hours": 2.0,
    }
    assert json.loads(json.dumps(extra)) == extra
    assert asset_extra(JobFacts.from_job(job), {}, None, {})["elastic"]["gpu_hours"] is None
    assert asset_extra(JobFacts("j", "n"), {}, None, usage)["elastic"] == {}

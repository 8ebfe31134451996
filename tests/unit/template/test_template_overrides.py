"""Per-run overrides (template/overrides.py): replicas, image, env, resources, command, metadata."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_volcano_wandb.template import TemplateError
from test_support.template_cases import (
    MACROS,
    containers,
    render,
    render_gpu,
    seed,
    task,
)

# --- replicas -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"), [(3, 3), ("3", 3), (" 12 ", 12), (0, 0), ("007", 7)]
)
def test_replicas_accept_ints_and_digit_strings(given: Any, expected: int) -> None:
    assert task(render(replicas={"worker": given}), "worker")["replicas"] == expected


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ("abc", "non-negative integer"),
        (-1, ">= 0"),
        ("-1", "non-negative integer"),
        (3.5, "non-negative integer"),
        (3.0, "non-negative integer"),
        ("", "non-negative integer"),
        (None, "non-negative integer"),
        (True, "non-negative integer"),
        (1025, "above the allowed maximum of 1024"),
        ("9" * 5000, "too large"),
        ("٣", "non-negative integer"),
    ],
)
def test_bad_replicas_name_the_task(given: Any, message: str) -> None:
    with pytest.raises(TemplateError, match=message) as info:
        render(replicas={"worker": given})
    assert info.value.path == "replicas.worker"
    assert "'worker'" in str(info.value)


def test_unknown_task_is_named() -> None:
    with pytest.raises(
        TemplateError, match="no task named 'workers'; the template's tasks are master, worker"
    ):
        render(replicas={"workers": 2})


def test_max_replicas_is_configurable() -> None:
    assert task(render(replicas={"worker": 2000}, max_replicas=4096), "worker")["replicas"] == 2000
    with pytest.raises(TemplateError, match="maximum of 8"):
        render(replicas={"worker": 9}, max_replicas=8)
    with pytest.raises(TemplateError, match="max_replicas"):
        render(max_replicas=0)


def test_template_replicas_above_the_bound_are_reported() -> None:
    template = seed()
    template["spec"]["tasks"][1]["replicas"] = 5000
    with pytest.raises(TemplateError, match=r"spec\.tasks\[1\]\.replicas: is 5000, above"):
        render(template)


# --- image, env, resources, command/args --------------------------------------------------


def test_image_for_all_containers_but_not_init_containers() -> None:
    template = seed()
    template["spec"]["tasks"][1]["template"]["spec"]["initContainers"] = [
        {"name": "wait", "image": "busybox:1.36"}
    ]
    job = render(template, image="registry.local/other:2")
    assert [
        c["image"] for t in job["spec"]["tasks"] for c in t["template"]["spec"]["containers"]
    ] == ["registry.local/other:2"] * 2
    assert task(job, "worker")["template"]["spec"]["initContainers"][0]["image"] == "busybox:1.36"


def test_image_per_task_targets_the_main_container() -> None:
    job = render_gpu(image={"worker": "w:2"})
    sidecar, main = containers(job, "worker")
    assert (sidecar["image"], main["image"]) == ("busybox:1.36", "w:2")
    assert containers(job, "master")[0]["image"] == MACROS["image_uri"]


@pytest.mark.parametrize("image", ["", " ", "a b ", 3, {"worker": None}, {"nope": "x"}])
def test_bad_image(image: Any) -> None:
    with pytest.raises(TemplateError):
        render(image=image)


def test_env_merges_by_name_and_override_wins() -> None:
    job = render_gpu(env={"NCCL_DEBUG": "WARN", "EPOCHS": 5, "DEBUG": False})
    for c in (containers(job, "master")[0], containers(job, "worker")[1]):
        assert c["env"] == [
            {"name": "WANDB_RUN_ID", "value": "k3x9p2qa"},
            {"name": "WANDB_RUN_GROUP", "value": "ddp-mlp-1"},
            {"name": "NCCL_DEBUG", "value": "WARN"},
            {"name": "BATCH_SIZE", "value": "64"},
            {"name": "EPOCHS", "value": "5"},
            {"name": "DEBUG", "value": "false"},
        ]
    assert containers(job, "worker")[0]["env"][-1]["name"] == "DEBUG"  # every container


def test_env_list_form_carries_secret_refs() -> None:
    secret = {
        "name": "WANDB_API_KEY",
        "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
    }
    given = [secret, {"name": "WANDB_RUN_ID", "value": "k3x9p2qa"}]
    before = copy.deepcopy(given)
    job = render(env=given, allowed_secrets=["wandb"])
    env = containers(job, "worker")[0]["env"]
    assert env == before
    assert env[0]["valueFrom"] is not secret["valueFrom"] and given == before
    assert containers(job, "master")[0]["env"][0]["valueFrom"] is not env[0]["valueFrom"]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"A": None}, "None"),
        ({"A": {"x": 1}}, "cannot be formatted"),
        ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "twice"),
        ([{"name": "A", "value": "1", "valueFrom": {}}], "exactly one"),
        ([{"name": "A"}], "exactly one"),
        ([{"name": "", "value": "1"}], "non-empty"),
        ([{"name": "A=B", "value": "1"}], "without '='"),
        ([{"name": "A", "valueFrom": "secret"}], "mapping"),
        ([{"name": "A", "value": "1", "extra": 1}], "unexpected key"),
        (["A=1"], "mapping"),
        ("A=1", "mapping or a list"),
    ],
)
def test_bad_env(env: Any, message: str) -> None:
    with pytest.raises(TemplateError, match=message):
        render(env=env)


def test_resources_merge_per_resource_into_the_main_container() -> None:
    job = render_gpu(
        resources={
            "worker": {"limits": {"nvidia.com/gpu": 4, "memory": None}, "requests": {"cpu": "8"}}
        },
    )
    sidecar, main = containers(job, "worker")
    assert main["resources"] == {
        "limits": {"nvidia.com/gpu": 4},
        "requests": {"cpu": "8", "memory": "16Gi"},
    }
    assert "resources" not in sidecar
    assert containers(job, "master")[0]["resources"]["limits"]["nvidia.com/gpu"] == 1


def test_resources_on_a_template_without_any() -> None:
    job = render(resources={"master": {"requests": {"cpu": "500m", "memory": "1Gi"}}})
    assert containers(job, "master")[0]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"}
    }


@pytest.mark.parametrize(
    "resources",
    [
        {"worker": {"limits": {"cpu": "two"}}},
        {"worker": {"limits": {"cpu": -1}}},
        {"worker": {"limits": {"cpu": True}}},
        {"worker": {"claims": []}},
        {"worker": "4 cpus"},
        {"nope": {"limits": {}}},
    ],
)
def test_bad_resources(resources: Any) -> None:
    with pytest.raises(TemplateError):
        render(resources=resources)


def test_command_and_args_replace_the_main_container_lists() -> None:
    job = render(
        command={"master": ["python", "-m", "train"]}, args={"worker": ["--epochs", 3, True]}
    )
    assert containers(job, "master")[0]["command"] == ["python", "-m", "train"]
    assert containers(job, "worker")[0]["args"] == ["--epochs", "3", "true"]
    assert "args" not in containers(job, "master")[0]


@pytest.mark.parametrize("value", ["python train.py", None, [None], [{"a": 1}]])
def test_bad_command(value: Any) -> None:
    with pytest.raises(TemplateError, match=r"command"):
        render(command={"master": value})


# --- metadata -----------------------------------------------------------------------------


def test_labels_and_annotations_merge_into_job_metadata() -> None:
    job = render(
        labels={"airflow.apache.org/dag-id": "train", "wandb_project": "other"},
        annotations={"airflow.apache.org/run-id": "manual__2025-01-01T00:00:00+00:00"},
    )
    assert job["metadata"]["labels"] == {
        "wandb_entity": "ml-platform",
        "wandb_project": "other",
        "airflow.apache.org/dag-id": "train",
    }
    assert job["metadata"]["annotations"] == {
        "airflow.apache.org/run-id": "manual__2025-01-01T00:00:00+00:00"
    }


def test_pod_labels_and_annotations_reach_every_task() -> None:
    sim = {
        "sim.airflow-volcano-wandb.io/duration": "5s",
        "sim.airflow-volcano-wandb.io/exit-code": 0,
    }
    job = render_gpu(pod_annotations=sim, pod_labels={"role": "trainer", "team": "ml"})
    for name, role in (("master", "trainer"), ("worker", "trainer")):
        metadata = task(job, name)["template"]["metadata"]
        assert metadata["annotations"] == {
            "sim.airflow-volcano-wandb.io/duration": "5s",
            "sim.airflow-volcano-wandb.io/exit-code": "0",
        }
        assert metadata["labels"] == {"role": role, "team": "ml"}
    seed_job = render(pod_annotations=sim)
    assert (
        task(seed_job, "worker")["template"]["metadata"]["annotations"][
            "sim.airflow-volcano-wandb.io/exit-code"
        ]
        == "0"
    )


@pytest.mark.parametrize(
    "overrides",
    [
        {"labels": {"run": "manual__2025-01-01T00:00:00+00:00"}},
        {"labels": {"Bad Key": "x"}},
        {"annotations": {"a": None}},
        {"pod_labels": {"x": "has space"}},
        {"pod_annotations": {"-bad": "x"}},
        {"labels": ["a=b"]},
    ],
)
def test_bad_metadata_overrides(overrides: dict[str, Any]) -> None:
    with pytest.raises(TemplateError):
        render(**overrides)


def test_namespace_queue_and_name_overrides() -> None:
    job = render(namespace="team-a", queue="gpu", name="train-dag-train-3f2a1b9c")
    assert job["metadata"]["namespace"] == "team-a"
    assert job["spec"]["queue"] == "gpu"
    assert job["metadata"]["name"] == "train-dag-train-3f2a1b9c"
    with pytest.raises(TemplateError, match=r"metadata\.namespace"):
        render(namespace="Team_A")
    for bad in ("", 3):
        with pytest.raises(TemplateError, match="name"):
            render(name=bad)


def test_name_override_is_fitted_like_a_template_name() -> None:
    job = render(name="Train DAG " + "x" * 80)
    name = job["metadata"]["name"]
    assert name.startswith("train-dag-xxx") and len(name) <= 51

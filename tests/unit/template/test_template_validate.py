"""Validation of the rendered job: every problem named by its JSON path."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_volcano_wandb.template import TemplateError, naming
from test_support.template_cases import MACROS, render_job

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")


def seed() -> dict[str, Any]:
    return yaml.safe_load(SEED.read_text())


def render(template: dict[str, Any], **macros: Any) -> dict[str, Any]:
    return render_job(template, macros={**MACROS, **macros})


def problems(template: dict[str, Any], **kwargs: Any) -> dict[str, str]:
    with pytest.raises(TemplateError) as info:
        render_job(template, macros=MACROS, **kwargs)
    return dict(info.value.problems)


def test_seed_is_valid_and_unchanged_apart_from_macros() -> None:
    job = render(seed())
    expected = seed()
    expected["metadata"]["name"] = "wandb-job-k3x9p2qa"
    expected["metadata"]["labels"] = {"wandb_entity": "ml-platform", "wandb_project": "retraining"}
    for t in expected["spec"]["tasks"]:
        t["template"]["spec"]["containers"][0]["image"] = MACROS["image_uri"]
    expected["spec"]["minAvailable"] = 2  # the gang is every DDP rank: master + 1 worker
    assert job == expected


@pytest.mark.parametrize("run_id", ["r" * 41, "r" * 42, "x" * 200, "Run_ID.With:Colons"])
def test_long_or_invalid_run_id_gives_a_valid_deterministic_name(run_id: str) -> None:
    first = render(seed(), run_id=run_id)["metadata"]["name"]
    assert first == render(seed(), run_id=run_id)["metadata"]["name"]
    assert DNS1035.match(first) and len(first) <= 63
    for t in ("master", "worker"):
        assert len(naming.pod_name(first, t, naming.DEFAULT_MAX_REPLICAS - 1)) <= 63
    if "wandb-job-" + run_id == first:
        assert len(first) <= 51
    else:
        assert first.endswith(naming.short_hash("wandb-job-" + run_id))


def test_name_at_the_budget_is_kept() -> None:
    # 63 - len("-worker-") - len("1023") = 51
    assert render(seed(), run_id="r" * 41)["metadata"]["name"] == "wandb-job-" + "r" * 41


def test_no_tasks() -> None:
    template = seed()
    template["spec"]["tasks"] = []
    with pytest.raises(TemplateError, match=r"spec\.tasks: must be a non-empty list"):
        render(template)


def test_missing_name_and_task_name() -> None:
    template = seed()
    del template["metadata"]["name"]
    with pytest.raises(TemplateError, match=r"metadata\.name: the job needs a name"):
        render(template)
    template = seed()
    del template["spec"]["tasks"][1]["name"]
    with pytest.raises(TemplateError, match=r"spec\.tasks\[1\]\.name: every task needs a name"):
        render(template)


def test_bad_task_names_and_duplicates() -> None:
    template = seed()
    template["spec"]["tasks"][1]["name"] = "Worker_1"
    assert "spec.tasks[1].name" in problems(template)
    template = seed()
    template["spec"]["tasks"][1]["name"] = "master"
    found = problems(template)
    assert "used twice" in found["spec.tasks[1].name"]


def test_task_names_too_long_for_pod_names() -> None:
    template = seed()
    template["spec"]["tasks"][1]["name"] = "w" * 55
    template["spec"]["plugins"]["pytorch"][1] = "--worker=" + "w" * 55
    with pytest.raises(TemplateError, match=r"metadata\.name: .*use shorter task names"):
        render(template)


@pytest.mark.parametrize(
    ("policy", "message"),
    [
        ({"event": "PodCrashed", "action": "RestartJob"}, "event 'PodCrashed' is not one of"),
        ({"event": "OutOfSync", "action": "RestartJob"}, "internal to Volcano"),
        ({"event": "PodFailed", "action": "SyncJob"}, "internal to Volcano"),
        ({"event": "PodFailed", "action": "Explode"}, "is not one of"),
        ({"event": "PodFailed"}, "None is not one of"),
        ({"event": "PodFailed", "action": {"do": "RestartJob"}}, "{'do': 'RestartJob'} is not"),
        ({"event": "PodFailed", "action": ["RestartJob"]}, "['RestartJob'] is not one of"),
        ({"action": "RestartJob"}, "needs an event"),
        ({"event": "PodFailed", "exitCode": 1, "action": "RestartJob"}, "not both"),
        ({"exitCode": 0, "action": "RestartJob"}, "non-zero"),
        ({"events": "PodFailed", "action": "RestartJob"}, "must be a list"),
    ],
)
def test_bad_policies(policy: dict[str, Any], message: str) -> None:
    template = seed()
    template["spec"]["policies"] = [policy]
    found = problems(template)
    assert any(k.startswith("spec.policies[0]") and message in v for k, v in found.items()), found


def test_every_volcano_user_event_and_action_is_accepted() -> None:
    template = seed()
    events = ["PodFailed", "PodEvicted", "PodPending", "Unknown", "TaskFailed", "JobUpdated"]
    actions = [
        "AbortJob",
        "RestartJob",
        "RestartTask",
        "RestartPod",
        "RestartPartition",
        "TerminateJob",
    ]
    template["spec"]["policies"] = [
        {"event": e, "action": a} for e, a in zip(events, actions, strict=True)
    ]
    template["spec"]["tasks"][1]["policies"] = [{"event": "*", "action": "ResumeJob"}]
    assert render(template)["spec"]["policies"][0]["event"] == "PodFailed"


def test_star_event_must_be_alone_and_events_unique() -> None:
    template = seed()
    template["spec"]["policies"] = [
        {"event": "*", "action": "RestartJob"},
        {"events": ["PodFailed", "PodFailed"], "action": "AbortJob"},
        {"event": "PodFailed", "action": "AbortJob"},
    ]
    found = problems(template)
    assert "only event policy" in found["spec.policies"]
    assert "more than one policy" in found["spec.policies[2]"]


def test_pytorch_plugin_roles_must_name_tasks() -> None:
    template = seed()
    template["spec"]["plugins"]["pytorch"] = ["--master=chief", "--worker=worker"]
    assert "--master=chief names no task" in problems(template)["spec.plugins.pytorch"]
    template["spec"]["plugins"]["pytorch"] = ["--master", "master", "-worker=replica"]
    assert "--worker=replica names no task" in problems(template)["spec.plugins.pytorch"]


def test_single_node_pytorch_without_a_worker_task_is_fine() -> None:
    template = seed()
    template["spec"]["tasks"].pop()
    template["spec"]["plugins"]["pytorch"] = ["--port=23456"]
    assert len(render(template)["spec"]["tasks"]) == 1


def test_pytorch_master_must_have_one_replica() -> None:
    found = problems(seed(), replicas={"master": 2})
    assert "exactly 1 replica" in found["spec.plugins.pytorch"]


def test_unknown_plugin_and_bad_arguments() -> None:
    template = seed()
    template["spec"]["plugins"]["horovod"] = []
    template["spec"]["plugins"]["svc"] = "yes"
    found = problems(template)
    assert "unknown Volcano plugin" in found["spec.plugins.horovod"]
    assert "list of strings" in found["spec.plugins.svc"]


def test_counts_and_min_available() -> None:
    template = seed()
    template["spec"]["tasks"][0]["replicas"] = -1
    template["spec"]["minAvailable"] = 5
    template["spec"]["maxRetry"] = -2
    template["spec"]["tasks"][1]["minAvailable"] = 2
    found = problems(template, add_master_policy=False)
    assert "must be >= 0" in found["spec.tasks[0].replicas"]
    assert "more than replicas (1)" in found["spec.tasks[1].minAvailable"]
    assert "must be >= 0" in found["spec.maxRetry"]


def test_template_min_available_above_total() -> None:
    template = seed()
    template["spec"]["minAvailable"] = 3
    assert "more than the total replicas (2)" in problems(template)["spec.minAvailable"]


def test_missing_replicas_and_bad_types() -> None:
    template = seed()
    del template["spec"]["tasks"][1]["replicas"]
    template["spec"]["tasks"][0]["replicas"] = 1.5
    found_text = ""
    with pytest.raises(TemplateError) as info:
        render(template)
    found_text = str(info.value)
    assert "spec.tasks[0].replicas" in found_text


def test_containers_are_checked() -> None:
    template = seed()
    worker = template["spec"]["tasks"][1]["template"]["spec"]
    worker["containers"].append({"name": "worker", "image": ""})
    worker["containers"][0]["env"] = [{"name": "A", "value": "1"}, {"value": "1"}]
    worker["containers"][0]["resources"] = {"limits": {"cpu": "lots"}}
    found = problems(template)
    base = "spec.tasks[1].template.spec.containers"
    assert "used twice" in found[f"{base}[1].name"]
    assert "non-empty string" in found[f"{base}[1].image"]
    assert "non-empty string" in found[f"{base}[0].env[1].name"]
    assert "not a Kubernetes quantity" in found[f"{base}[0].resources.limits.cpu"]


def test_env_value_structure_is_reported_with_path() -> None:
    template = seed()
    template["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "A", "value": {"x": 1}}
    ]
    with pytest.raises(TemplateError, match=r"containers\[0\]\.env\[0\]\.value"):
        render(template)


def test_no_containers() -> None:
    template = seed()
    template["spec"]["tasks"][1]["template"]["spec"]["containers"] = []
    assert "non-empty list" in problems(template)["spec.tasks[1].template.spec.containers"]


def test_labels_and_annotations_in_the_template_are_checked() -> None:
    template = seed()
    template["metadata"]["labels"]["bad key!"] = "x"
    template["metadata"]["annotations"] = {"ok": "v", "also/bad/key": "v"}
    found = problems(template)
    assert 'metadata.labels["bad key!"]' in found
    assert 'metadata.annotations["also/bad/key"]' in found


def test_numbers_outside_int64_are_rejected() -> None:
    template = seed()
    template["spec"]["tasks"][1]["template"]["spec"]["activeDeadlineSeconds"] = 2**64
    found = problems(template)
    assert "int64" in found["spec.tasks[1].template.spec.activeDeadlineSeconds"]


def test_all_problems_are_reported_together() -> None:
    template = seed()
    template["spec"]["tasks"][0]["name"] = "Master"
    template["spec"]["policies"] = [{"event": "Nope", "action": "RestartJob"}]
    template["metadata"]["namespace"] = "Not Valid"
    with pytest.raises(TemplateError) as info:
        render(template)
    paths = [p for p, _ in info.value.problems]
    assert {"spec.tasks[0].name", "spec.policies[0]", "metadata.namespace"} <= set(paths)
    assert str(info.value).startswith("the rendered Volcano Job is invalid")
    assert info.value.path == paths[0]
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("volumes", "where", "message"),
    [
        ([{"volumeClaimName": "data"}], "spec.volumes[0].mountPath", "is required"),
        (
            [
                {"mountPath": "/data", "volumeClaimName": "a"},
                {"mountPath": "/data", "volumeClaimName": "b"},
            ],
            "spec.volumes[1].mountPath",
            "used twice",
        ),
        ([{"mountPath": "/data"}], "spec.volumes[0]", "volumeClaimName"),
        (
            [{"mountPath": "/d", "volumeClaimName": "a", "volumeClaim": {}}],
            "spec.volumes[0]",
            "both",
        ),
        (
            [{"mountPath": "/d", "volumeClaimName": "Not_A_Name"}],
            "spec.volumes[0].volumeClaimName",
            "not a valid PVC name",
        ),
    ],
)
def test_job_volumes_follow_volcanos_admission_rules(volumes, where, message) -> None:
    template = seed()
    template["spec"]["volumes"] = volumes
    found = problems(template)
    assert where in found and message in found[where], found


def test_valid_job_volumes_pass() -> None:
    template = seed()
    template["spec"]["volumes"] = [
        {"mountPath": "/data", "volumeClaimName": "data"},
        {"mountPath": "/out", "volumeClaim": {"accessModes": ["ReadWriteOnce"]}},
    ]
    assert render(template)["spec"]["volumes"] == template["spec"]["volumes"]

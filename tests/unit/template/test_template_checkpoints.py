"""The checkpoint volume, the contract's env and the grace period the renderer adds (pure)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from airflow_volcano_wandb.template import POD_SECURITY_LEVELS, TemplateError
from test_support.pod_security_corpus import restricted_pod
from test_support.template_cases import MACROS, SEED, render_job
from tests.unit.template.test_template_pod_security import job_for

CLAIM = "training-checkpoints"
RUN_DIR = f"/checkpoints/{MACROS['run_id']}"


def _task(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in job["spec"]["tasks"] if t["name"] == name)["template"]["spec"]


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container.get("env", [])}


def test_every_task_mounts_the_claim_with_its_runs_own_directory_and_grace() -> None:
    job = render_job(
        SEED, macros=MACROS, replicas={"worker": 3}, checkpoint_volume=CLAIM, checkpoint_grace=120
    )
    for task in ("master", "worker"):
        spec = _task(job, task)
        assert spec["terminationGracePeriodSeconds"] == 120
        assert spec["volumes"] == [
            {"name": "avw-checkpoints", "persistentVolumeClaim": {"claimName": CLAIM}}
        ]
        (container,) = spec["containers"]
        assert container["volumeMounts"] == [
            {"name": "avw-checkpoints", "mountPath": "/checkpoints"}
        ]
        env = _env(container)
        assert env["AVW_CHECKPOINT_DIR"] == RUN_DIR
        assert env["AVW_RESUME_FROM"] == "latest"


def test_two_runs_never_share_a_directory() -> None:
    other = {**MACROS, "run_id": "a0b1c2d3"}
    dirs = {
        _env(_task(render_job(SEED, macros=m, checkpoint_volume=CLAIM), "master")["containers"][0])[
            "AVW_CHECKPOINT_DIR"
        ]
        for m in (MACROS, other)
    }
    assert dirs == {RUN_DIR, "/checkpoints/a0b1c2d3"}


def test_without_a_claim_nothing_changes() -> None:
    assert render_job(SEED, macros=MACROS, checkpoint_volume=None) == render_job(
        SEED, macros=MACROS
    )
    graced = render_job(SEED, macros=MACROS, checkpoint_grace=90)
    for task in ("master", "worker"):
        spec = _task(graced, task)
        assert spec["terminationGracePeriodSeconds"] == 90
        assert "volumes" not in spec and "AVW_CHECKPOINT_DIR" not in _env(spec["containers"][0])


def test_the_grace_replaces_the_templates_own() -> None:
    template = render_job(SEED, macros=MACROS)  # a rendered job is a valid template too
    _task(template, "worker")["terminationGracePeriodSeconds"] = 5
    job = render_job(template, macros=MACROS, checkpoint_grace=600)
    assert _task(job, "worker")["terminationGracePeriodSeconds"] == 600


def test_the_run_directory_is_the_providers_and_the_resume_point_the_templates() -> None:
    job = render_job(
        SEED,
        macros=MACROS,
        env={"AVW_CHECKPOINT_DIR": "/elsewhere", "AVW_RESUME_FROM": "/checkpoints/old/step-7.pt"},
        checkpoint_volume=CLAIM,
    )
    env = _env(_task(job, "worker")["containers"][0])
    assert env["AVW_CHECKPOINT_DIR"] == RUN_DIR
    assert env["AVW_RESUME_FROM"] == "/checkpoints/old/step-7.pt"


def test_only_the_main_container_mounts_the_claim() -> None:
    pod = restricted_pod()
    sidecar = {**copy.deepcopy(pod["spec"]["containers"][0]), "name": "logger"}
    pod["spec"]["containers"].insert(0, sidecar)  # "main" is the task's name, not the first
    job = render_job(job_for(pod), macros=MACROS, checkpoint_volume=CLAIM)
    logger, main = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert "volumeMounts" not in logger and "AVW_CHECKPOINT_DIR" not in _env(logger)
    assert main["volumeMounts"][0]["mountPath"] == "/checkpoints"


@pytest.mark.parametrize("level", POD_SECURITY_LEVELS)
def test_the_claim_passes_every_pod_security_level(level: str) -> None:
    job = render_job(
        job_for(restricted_pod()),
        macros=MACROS,
        pod_security=level,
        checkpoint_volume=CLAIM,
        checkpoint_grace=60,
    )
    assert job["spec"]["tasks"][0]["template"]["spec"]["volumes"][0]["name"] == "avw-checkpoints"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"checkpoint_volume": ""}, "checkpoint_volume"),
        ({"checkpoint_volume": "Training_Checkpoints"}, "checkpoint_volume"),
        ({"checkpoint_volume": "a" * 254}, "checkpoint_volume"),
        ({"checkpoint_volume": 7}, "checkpoint_volume"),
        ({"checkpoint_grace": 0}, "checkpoint_grace"),
        ({"checkpoint_grace": -30}, "checkpoint_grace"),
        ({"checkpoint_grace": "60"}, "checkpoint_grace"),
        ({"checkpoint_grace": 1.5}, "checkpoint_grace"),
        ({"checkpoint_grace": True}, "checkpoint_grace"),
    ],
)
def test_bad_checkpoint_arguments_are_errors_naming_the_field(
    kwargs: dict[str, Any], field: str
) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(SEED, macros=MACROS, **kwargs)
    assert info.value.path == field


@pytest.mark.parametrize("run_id", ["..", ".", "a/b"])
def test_a_run_id_that_is_no_directory_name_is_refused(run_id: str) -> None:
    # A W&B run id never holds "/", but a macros= override could; "." or ".." would share.
    with pytest.raises(TemplateError) as info:
        render_job(SEED, macros={**MACROS, "run_id": run_id}, checkpoint_volume=CLAIM)
    assert info.value.path == "checkpoint_volume"


def test_a_name_or_mount_the_provider_needs_is_an_error_not_a_silent_change() -> None:
    pod = restricted_pod()
    pod["spec"]["volumes"] = [{"name": "avw-checkpoints", "emptyDir": {}}]
    with pytest.raises(TemplateError, match="already named 'avw-checkpoints'") as info:
        render_job(job_for(pod), macros=MACROS, checkpoint_volume=CLAIM)
    assert info.value.path == "spec.tasks[0].template.spec.volumes"
    pod = restricted_pod()
    pod["spec"]["volumes"] = [{"name": "scratch", "emptyDir": {}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [
        {"name": "scratch", "mountPath": "/checkpoints/"}
    ]
    with pytest.raises(TemplateError, match="mounted at /checkpoints already") as info:
        render_job(job_for(pod), macros=MACROS, checkpoint_volume=CLAIM)
    assert info.value.path == "spec.tasks[0].template.spec.containers[0].volumeMounts"


def test_the_operator_names_the_directory_after_the_wandb_run() -> None:
    from airflow_volcano_wandb.airflow_compat import AirflowException
    from test_support.hostile_templates import seed
    from tests.unit.operators.test_operator_template_policy import render as operator_render

    job = operator_render(seed(), checkpoint_volume=CLAIM, checkpoint_grace=300)
    for task in ("master", "worker"):
        spec = _task(job, task)
        assert spec["terminationGracePeriodSeconds"] == 300
        volumes = {v["name"]: v for v in spec["volumes"]}  # /dev/shm's too
        assert volumes["avw-checkpoints"]["persistentVolumeClaim"] == {"claimName": CLAIM}
    master = _env(_task(job, "master")["containers"][0])
    assert master["AVW_CHECKPOINT_DIR"] == f"/checkpoints/{master['WANDB_RUN_ID']}"
    with pytest.raises(AirflowException, match=r"nothing was submitted: checkpoint_volume: "):
        operator_render(seed(), checkpoint_volume="")


def test_without_a_shared_volume_the_runs_artifact_keeps_the_checkpoints() -> None:
    job = render_job(SEED, macros=MACROS, replicas={"worker": 2}, checkpoint_artifact=True)
    for task in ("master", "worker"):
        spec = _task(job, task)
        # Each pod's own scratch: where a checkpoint is written before it is uploaded.
        assert spec["volumes"] == [{"name": "avw-checkpoints", "emptyDir": {}}]
        env = _env(spec["containers"][0])
        assert env["AVW_CHECKPOINT_ARTIFACT"] == f"checkpoint-{MACROS['run_id']}"
        assert env["AVW_CHECKPOINT_DIR"] == RUN_DIR
        assert env["AVW_RESUME_FROM"] == "latest"


def test_with_a_claim_and_the_artifact_the_claim_is_the_local_copy() -> None:
    job = render_job(SEED, macros=MACROS, checkpoint_volume=CLAIM, checkpoint_artifact=True)
    spec = _task(job, "worker")
    assert spec["volumes"] == [
        {"name": "avw-checkpoints", "persistentVolumeClaim": {"claimName": CLAIM}}
    ]
    artifact = _env(spec["containers"][0])["AVW_CHECKPOINT_ARTIFACT"]
    assert artifact == f"checkpoint-{MACROS['run_id']}"


def test_the_artifact_is_the_providers_and_the_templates_is_kept_without_it() -> None:
    env = {"AVW_CHECKPOINT_ARTIFACT": "someone-elses"}
    owned = render_job(SEED, macros=MACROS, env=env, checkpoint_artifact=True)
    assert _env(_task(owned, "master")["containers"][0])["AVW_CHECKPOINT_ARTIFACT"] == (
        f"checkpoint-{MACROS['run_id']}"
    )
    kept = render_job(SEED, macros=MACROS, env=env)
    assert _env(_task(kept, "master")["containers"][0])["AVW_CHECKPOINT_ARTIFACT"] == (
        "someone-elses"
    )


@pytest.mark.parametrize(
    ("kwargs", "macros"),
    [
        ({"checkpoint_artifact": "yes"}, MACROS),
        ({"checkpoint_artifact": 1}, MACROS),
        ({"checkpoint_artifact": True}, {**MACROS, "run_id": "a b"}),
        ({"checkpoint_artifact": True}, {**MACROS, "run_id": "x" * 120}),
        ({"checkpoint_artifact": True}, {**MACROS, "run_id": ".."}),
    ],
)
def test_a_bad_artifact_request_is_an_error_naming_it(
    kwargs: dict[str, Any], macros: dict[str, Any]
) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(SEED, macros=macros, **kwargs)
    assert info.value.path == "checkpoint_artifact"


def test_the_operator_refuses_the_artifact_for_a_run_that_is_not_online() -> None:
    from airflow_volcano_wandb.airflow_compat import AirflowException
    from test_support.hostile_templates import seed
    from tests.unit.operators.test_operator_template_policy import render as operator_render

    job = operator_render(seed(), checkpoint_artifact=True)
    master = _env(_task(job, "master")["containers"][0])
    assert master["AVW_CHECKPOINT_ARTIFACT"] == f"checkpoint-{master['WANDB_RUN_ID']}"
    for mode in ("offline", "disabled"):
        with pytest.raises(AirflowException, match=r"checkpoint_artifact needs an online W&B run"):
            operator_render(seed(), checkpoint_artifact=True, wandb_mode=mode)

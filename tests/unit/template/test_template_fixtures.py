"""The realistic templates in tests/fixtures/templates, rendered end to end."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_volcano_wandb.template import TemplateError, master_task_name
from test_support.template_cases import MACROS, render_gpu, render_job

REPO = Path(__file__).resolve().parents[3]
FIXTURES = REPO / "tests" / "fixtures" / "templates"
SECRET = {
    "name": "WANDB_API_KEY",
    "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}},
}


def task(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in job["spec"]["tasks"] if t["name"] == name)


def main(job: dict[str, Any], name: str) -> dict[str, Any]:
    return next(c for c in task(job, name)["template"]["spec"]["containers"] if c["name"] == name)


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.*")), ids=lambda p: p.name)
def test_every_fixture_renders(path: Path) -> None:
    extra = {"epochs": 3, "lr": 0.001, "batch_size": 64, "np": 3, "shards": 4}
    job = render_job(path, macros={**MACROS, **extra})
    assert job["apiVersion"] == "batch.volcano.sh/v1alpha1" and job["kind"] == "Job"
    # The only ${...} left is the MPI fixture's escaped shell variable.
    assert set(re.findall(r"\$\{[^}]*\}", repr(job))) <= {"${MPI_HOST}"}


def test_chief_replica_roles_and_typed_args() -> None:
    job = render_job(
        FIXTURES / "chief-replica-pytorch.yaml",
        macros={**MACROS, "epochs": 3, "lr": 0.001},
        replicas={"replica": "8"},
        env=[SECRET],
        allowed_secrets=["wandb"],
    )
    assert job["metadata"]["name"] == "ddp-ddp-mlp-1"
    assert job["metadata"]["annotations"] == {"wandb.ai/author": "airflow"}
    assert job["metadata"]["labels"]["app.kubernetes.io/part-of"] == "retraining"
    assert main(job, "chief")["args"] == ["--epochs=3", "--lr", "0.001", "--run-id", "k3x9p2qa"]
    assert task(job, "replica")["replicas"] == 8
    assert task(job, "replica")["minAvailable"] == 8
    assert job["spec"]["minAvailable"] == 9
    assert main(job, "replica")["env"][-1] == SECRET
    assert job["spec"]["queue"] == "training" and job["spec"]["maxRetry"] == 2


def test_chief_replica_plugin_args_must_match_task_names() -> None:
    template = yaml.safe_load((FIXTURES / "chief-replica-pytorch.yaml").read_text())
    template["spec"]["plugins"]["pytorch"] = ["--master=master", "--worker=replica"]
    with pytest.raises(TemplateError, match="--master=master names no task"):
        render_job(template, macros={**MACROS, "epochs": 3, "lr": 0.001})


def test_svc_gpu_template() -> None:
    job = render_gpu(
        replicas={"worker": 3},
        env=[SECRET, {"name": "NCCL_DEBUG", "value": "WARN"}],
        allowed_secrets=["wandb"],
        pod_annotations={"sim.airflow-volcano-wandb.io/duration": "30s"},
    )
    assert job["spec"]["plugins"]["svc"] == ["--publish-not-ready-addresses=true"]
    assert job["spec"]["minAvailable"] == 4  # was 3 == 1 + 2: a gang of all
    assert task(job, "master")["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    worker = main(job, "worker")
    assert worker["resources"]["limits"] == {"nvidia.com/gpu": 1, "memory": "16Gi"}
    assert {e["name"]: e.get("value") for e in worker["env"]} == {
        "WANDB_RUN_ID": "k3x9p2qa",
        "WANDB_RUN_GROUP": "ddp-mlp-1",
        "NCCL_DEBUG": "WARN",
        "BATCH_SIZE": "64",
        "WANDB_API_KEY": None,
    }
    assert task(job, "worker")["template"]["spec"]["tolerations"][0]["key"] == "nvidia.com/gpu"
    assert task(job, "worker")["template"]["metadata"] == {
        "labels": {"role": "worker"},
        "annotations": {"sim.airflow-volcano-wandb.io/duration": "30s"},
    }


def test_mpi_template_keeps_escaped_shell_variables() -> None:
    job = render_job(
        FIXTURES / "mpi-horovod.yaml", macros={**MACROS, "np": 3}, replicas={"mpiworker": 4}
    )
    command = main(job, "mpimaster")["command"]
    assert command[-1] == "mpiexec --allow-run-as-root --host ${MPI_HOST} -np 3 python /train.py"
    assert job["spec"]["minAvailable"] == 5
    assert task(job, "mpimaster")["policies"] == [
        {"event": "TaskCompleted", "action": "CompleteJob"}
    ]
    assert "policies" not in task(job, "mpiworker")


def test_mpi_master_must_exist() -> None:
    template = yaml.safe_load((FIXTURES / "mpi-horovod.yaml").read_text())
    template["spec"]["plugins"]["mpi"] = ["--master=launcher"]
    with pytest.raises(TemplateError, match="--master=launcher names no task"):
        render_job(template, macros={**MACROS, "np": 3})


@pytest.mark.parametrize("shards", [4, "4"])
def test_plain_json_job_with_typed_replicas(shards: Any) -> None:
    job = render_job(FIXTURES / "plain-tasks.json", macros={**MACROS, "shards": shards})
    assert task(job, "shard")["replicas"] == 4
    assert main(job, "prepare")["args"] == ["prepare", "--shards=4"]
    assert task(job, "shard")["dependsOn"] == {"name": ["prepare"]}
    assert job["spec"]["schedulerName"] == "volcano"
    assert job["spec"]["policies"][0] == {"exitCode": 3, "action": "RestartTask"}


def test_plain_json_job_rejects_a_structure_for_replicas() -> None:
    with pytest.raises(TemplateError, match=r"macro \$\{shards\} is a list"):
        render_job(FIXTURES / "plain-tasks.json", macros={**MACROS, "shards": [4]})
    template = yaml.safe_load((FIXTURES / "plain-tasks.json").read_text())
    template["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["args"] = ["prepare"]
    with pytest.raises(TemplateError, match=r"spec\.tasks\[1\]\.replicas: replicas must be"):
        render_job(template, macros={**MACROS, "shards": {"n": 4}})


def test_hundred_task_template_renders() -> None:
    template = yaml.safe_load((FIXTURES / "plain-tasks.json").read_text())
    base = template["spec"]["tasks"][0]
    template["spec"]["tasks"] = [
        {
            **base,
            "name": f"t{i}",
            "template": {
                "spec": {
                    "containers": [{**base["template"]["spec"]["containers"][0], "name": f"t{i}"}]
                }
            },
        }
        for i in range(100)
    ]
    job = render_job(template, macros={**MACROS, "shards": 2}, replicas={"t99": 5})
    assert len(job["spec"]["tasks"]) == 100 and job["spec"]["tasks"][99]["replicas"] == 5


@pytest.mark.parametrize(
    ("fixture", "master"),
    [
        ("chief-replica-pytorch.yaml", "chief"),
        ("svc-gpu-pytorch.yaml", "master"),
        ("mpi-horovod.yaml", "mpimaster"),
        ("plain-tasks.json", "prepare"),
        ("wandb-queue-config.json", "master"),
    ],
)
def test_master_task_name(fixture: str, master: str) -> None:
    extra = {"epochs": 3, "lr": 0.001, "batch_size": 64, "np": 3, "shards": 4}
    job = render_job(FIXTURES / fixture, macros={**MACROS, **extra})
    assert master_task_name(job) == master


def test_master_task_name_of_malformed_jobs() -> None:
    assert master_task_name({}) is None
    assert master_task_name({"spec": {"tasks": "x"}}) is None
    job = {"spec": {"tasks": [{"name": "a"}], "plugins": {"pytorch": ["--master=zz"]}}}
    assert master_task_name(job) == "a"

"""The master-policy contract and the template defaults (template/policy.py): the policy added,
kept single, following the plugin's master name, or opted out; the scheduler's default; the run
env applied last."""

from __future__ import annotations

import pytest
import yaml

from airflow_volcano_wandb.template import TemplateError
from test_support.template_cases import (
    FIXTURES,
    MACROS,
    containers,
    render,
    render_gpu,
    render_job,
    seed,
    task,
)

# --- master policy and defaults ------------------------------------------------------------


def test_master_policy_is_added_when_missing() -> None:
    job = render_gpu()
    assert task(job, "master")["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in task(job, "worker")


def test_master_policy_is_not_duplicated_and_can_be_opted_out() -> None:
    assert task(render(), "master")["policies"] == [
        {"event": "TaskCompleted", "action": "CompleteJob"}
    ]
    template = seed()
    del template["spec"]["tasks"][0]["policies"]
    assert "policies" not in task(render(template, add_master_policy=False), "master")
    job = render_gpu(add_master_policy=False)
    assert "policies" not in task(job, "master")


def test_master_policy_follows_the_plugins_master_name() -> None:
    template = yaml.safe_load((FIXTURES / "chief-replica-pytorch.yaml").read_text())
    del template["spec"]["tasks"][0]["policies"]
    job = render_job(template, macros={**MACROS, "epochs": 1, "lr": 0.1})
    assert task(job, "chief")["policies"] == [{"event": "TaskCompleted", "action": "CompleteJob"}]
    assert "policies" not in task(job, "replica")


def test_conflicting_master_policy_is_an_error_unless_opted_out() -> None:
    template = seed()
    template["spec"]["tasks"][0]["policies"] = [{"event": "TaskCompleted", "action": "RestartJob"}]
    with pytest.raises(
        TemplateError, match=r"spec\.tasks\[0\]\.policies\[0\].*add_master_policy=False"
    ):
        render(template)
    assert (
        task(render(template, add_master_policy=False), "master")["policies"][0]["action"]
        == "RestartJob"
    )


def test_master_policy_is_not_added_without_the_pytorch_plugin() -> None:
    job = render_job(FIXTURES / "plain-tasks.json", macros={**MACROS, "shards": 2})
    assert all("policies" not in t for t in job["spec"]["tasks"])


def test_missing_scheduler_name_defaults_to_volcano() -> None:
    template = seed()
    del template["spec"]["schedulerName"]
    assert render(template)["spec"]["schedulerName"] == "volcano"
    template["spec"]["schedulerName"] = "custom"
    assert render(template, allowed_schedulers=["custom"])["spec"]["schedulerName"] == "custom"


def test_add_master_policy_must_be_a_bool() -> None:
    with pytest.raises(TemplateError):
        render(add_master_policy="no")


def test_env_skips_init_containers() -> None:
    template = seed()
    template["spec"]["tasks"][1]["template"]["spec"]["initContainers"] = [
        {"name": "wait", "image": "busybox:1.36"}
    ]
    job = render(template, env={"A": "1"})
    assert "env" not in task(job, "worker")["template"]["spec"]["initContainers"][0]
    assert containers(job, "worker")[0]["env"] == [{"name": "A", "value": "1"}]


def test_run_env_is_applied_last_per_master_or_other_task_and_validated() -> None:
    from airflow_volcano_wandb.template import RunEnv

    job = render(
        env={"WANDB_RUN_ID": "from-the-dag", "EPOCHS": 3},
        run_env=RunEnv(master={"WANDB_RUN_ID": "r1"}, others={"WANDB_MODE": "disabled"}),
    )
    master_env = {e["name"]: e["value"] for e in containers(job, "master")[0]["env"]}
    worker_env = {e["name"]: e["value"] for e in containers(job, "worker")[0]["env"]}
    assert master_env["WANDB_RUN_ID"] == "r1" and "WANDB_MODE" not in master_env
    assert worker_env["WANDB_MODE"] == "disabled" and worker_env["WANDB_RUN_ID"] == "from-the-dag"
    assert master_env["EPOCHS"] == worker_env["EPOCHS"] == "3"
    with pytest.raises(TemplateError, match="env"):
        render(run_env=RunEnv(master={"A=B": "x"}, others={}))

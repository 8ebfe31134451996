"""``max_total_gpus``: a cap on the GPUs a whole gang may ask for (replicas x GPUs per pod)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_volcano_wandb.template import TemplateError
from test_support.template_cases import MACROS, render_job

SEED = (
    Path(__file__).resolve().parents[3]
    / "dags"
    / "templates"
    / "volcano-pytorch-queue-template.yaml"
)


def render(workers: Any, gpus: Any, **options: Any) -> dict[str, Any]:
    limits = {"limits": {"nvidia.com/gpu": gpus}}
    return render_job(
        yaml.safe_load(SEED.read_text()),
        macros=MACROS,
        replicas={"worker": workers},
        resources={"master": limits, "worker": limits},
        **options,
    )


def test_a_gang_within_the_cap_renders():
    job = render(7, 8, max_total_gpus=64)  # 8 ranks x 8 GPUs
    assert [t["replicas"] for t in job["spec"]["tasks"]] == [1, 7]


def test_the_form_sent_values_are_digit_strings_and_still_counted():
    with pytest.raises(TemplateError) as refused:
        render("64", "8", max_total_gpus="64")  # as a Trigger form's Jinja renders them
    assert refused.value.path == "spec.tasks"
    message = str(refused.value)
    assert "520 GPUs in all (master 1x8, worker 64x8)" in message, message
    assert "max_total_gpus=64" in message


def test_no_cap_by_default_and_cpu_jobs_cost_nothing():
    assert render(64, 8)["spec"]["tasks"][1]["replicas"] == 64
    assert render(64, 0, max_total_gpus=0)["spec"]["tasks"][1]["replicas"] == 64


@pytest.mark.parametrize("cap", ["abc", -1, 2.5, "8; rm -rf /"])
def test_a_cap_that_is_not_a_count_is_refused_naming_it(cap):
    with pytest.raises(TemplateError, match="max_total_gpus"):
        render(1, 1, max_total_gpus=cap)

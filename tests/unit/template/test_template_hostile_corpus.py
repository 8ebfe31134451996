"""A queue editor's escapes (test_support/hostile_templates.py): each refused, naming its field.

Refused by ``render_job``'s defaults (and the deployment's lists), accepted only when the DAG
allows that one value; the seed and the example templates still render.
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from airflow_volcano_wandb.template import TemplateError, render_job
from test_support.hostile_templates import (
    CASES,
    DEPLOYMENT,
    MACROS,
    OTHER_TASK_KEY_SECRET,
    OWN_KEY_SECRET,
    REPO,
    Hostile,
    seed,
)

# A template's W&B Launch template variables sit beside it as ``<name>.variables.json``.
VARIABLES_SUFFIX = ".variables.json"
EXAMPLES = sorted(
    p for p in (REPO / "dags" / "templates").glob("*.*") if not p.name.endswith(VARIABLES_SUFFIX)
) + sorted((REPO / "tests" / "fixtures" / "templates").glob("*.*"))
FIXTURE_MACROS = {**MACROS, "epochs": 3, "lr": 0.001, "batch_size": 64, "np": 3, "shards": 4}


def test_the_corpus_covers_every_escape_in_every_container_kind_and_task() -> None:
    assert len(CASES) >= 30
    assert len({case.name for case in CASES}) == len(CASES)
    fields = {case.field for case in CASES}
    for kind in ("containers", "initContainers", "ephemeralContainers"):
        for task in (0, 1):
            assert f"spec.tasks[{task}].template.spec.{kind}[0].envFrom[0].secretRef.name" in fields
    arguments = {case.argument for case in CASES}
    assert arguments == {
        "allowed_secrets",
        "allowed_schedulers",
        "allowed_queues",
        "allowed_priority_classes",
    }


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_every_hostile_template_is_refused_naming_its_field(case: Hostile) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(case.template(), **DEPLOYMENT)
    assert dict(info.value.problems).keys() == {case.field}
    assert case.field in str(info.value)
    assert case.argument in str(info.value)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_dag_can_allow_exactly_that_value(case: Hostile) -> None:
    default = inspect.signature(render_job).parameters[case.argument].default or ()
    allowed = [*DEPLOYMENT.get(case.argument, default), case.value]
    render_job(case.template(), **{**DEPLOYMENT, case.argument: allowed})


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_the_seed_and_the_example_templates_are_still_accepted(path: Path) -> None:
    own_key = DEPLOYMENT["run_env"]
    variables = path.with_name(path.stem + VARIABLES_SUFFIX)
    schemas = json.loads(variables.read_text()) if variables.exists() else None  # defaults
    job = render_job(
        path,
        macros=FIXTURE_MACROS,
        namespace="team-a",
        run_env=own_key,
        template_variable_schemas=schemas,
    )
    for task in job["spec"]["tasks"]:
        for container in task["template"]["spec"]["containers"]:
            assert {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {
                "name": OWN_KEY_SECRET, "key": "api-key"}}} in container["env"]  # fmt: skip


def test_the_seed_is_accepted_under_the_deployments_lists() -> None:
    render_job(seed(), **DEPLOYMENT)


def test_the_runs_own_key_may_be_named_anywhere() -> None:
    """The provider's own key (from ``run_env``) is allowed without a list: the pods have it."""
    template = seed()
    pod = template["spec"]["tasks"][1]["template"]["spec"]
    pod["volumes"] = [{"name": "key", "secret": {"secretName": OWN_KEY_SECRET}}]
    pod["containers"][0]["envFrom"] = [{"secretRef": {"name": OWN_KEY_SECRET}}]
    render_job(template, **DEPLOYMENT)


def test_without_a_run_env_no_secret_at_all_is_allowed_by_default() -> None:
    template = seed()
    pod = template["spec"]["tasks"][0]["template"]["spec"]
    pod["volumes"] = [{"name": "key", "secret": {"secretName": OWN_KEY_SECRET}}]
    with pytest.raises(TemplateError) as info:
        render_job(template, macros=MACROS, namespace="team-a")
    assert info.value.path == "spec.tasks[0].template.spec.volumes[0].secret.secretName"
    assert "allowed_secrets (none)" in str(info.value)


def test_an_env_override_naming_a_secret_needs_the_list_too() -> None:
    """The rule is on the final job: ``env=`` (often filled from the trigger form) too."""
    stolen = {"name": "X", "valueFrom": {"secretKeyRef": {"name": OTHER_TASK_KEY_SECRET}}}
    with pytest.raises(TemplateError, match="allowed_secrets"):
        render_job(seed(), **DEPLOYMENT, env=[stolen])
    render_job(seed(), **DEPLOYMENT, env=[stolen], allowed_secrets=[OTHER_TASK_KEY_SECRET])


@pytest.mark.parametrize(
    "reference",
    [{"secretKeyRef": "team-b"}, {"secretKeyRef": {"key": "k"}}, {"secretKeyRef": {"name": 5}}],
)
def test_a_malformed_secret_reference_is_refused_not_skipped(reference: dict[str, Any]) -> None:
    template = seed()
    template["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["env"] = [
        {"name": "X", "valueFrom": reference}
    ]
    with pytest.raises(TemplateError, match="allowed_secrets"):
        render_job(template, **DEPLOYMENT)


def test_every_escape_at_once_comes_in_one_error() -> None:
    template = seed()
    for case in CASES:
        if "initContainers" in case.field or "ephemeralContainers" in case.field:
            continue  # each adds a container named "helper": once per pod is enough
        case.change(template)
    with pytest.raises(TemplateError) as info:
        render_job(template, **DEPLOYMENT)
    assert "spec.queue" in dict(info.value.problems)
    assert "spec.schedulerName" in dict(info.value.problems)


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("allowed_secrets", "team-b-*"),
        ("allowed_schedulers", "volcano"),
        ("allowed_queues", [""]),
        ("allowed_priority_classes", 5),
    ],
)
def test_malformed_allow_lists_are_errors_naming_the_argument(argument: str, value: Any) -> None:
    with pytest.raises(TemplateError) as info:
        render_job(seed(), **{**DEPLOYMENT, argument: value})
    assert info.value.path is not None and info.value.path.startswith(argument)


def test_no_scheduler_list_allows_any_scheduler() -> None:
    template = seed()
    template["spec"]["schedulerName"] = "default-scheduler"
    assert render_job(template, **DEPLOYMENT, allowed_schedulers=None)["spec"]["schedulerName"]


def test_the_queue_argument_is_checked_like_the_templates() -> None:
    with pytest.raises(TemplateError) as info:
        render_job(seed(), **DEPLOYMENT, queue="team-b-gpu")
    assert info.value.path == "spec.queue"
    job = render_job(seed(), **DEPLOYMENT, queue="team-a")
    assert job["spec"]["queue"] == "team-a"


def test_a_job_without_a_queue_is_judged_as_volcanos_default_queue() -> None:
    with pytest.raises(TemplateError) as info:
        render_job(seed(), **{**DEPLOYMENT, "allowed_queues": ["team-a"]})
    assert "so Volcano puts it in 'default'" in str(info.value)

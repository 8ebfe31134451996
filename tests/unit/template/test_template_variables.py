"""W&B Launch template variables: ``{{name}}`` filled within the queue's guardrails."""

from __future__ import annotations

import json

import pytest
from airflow.sdk import Param

from airflow_volcano_wandb.template import TemplateError, params_from_template_variables
from test_support.template_cases import MACROS, SEED, render_job

SCHEMAS = [
    # As the W&B API returns them: the schema a JSON string, or already a dict.
    {
        "name": "workers",
        "schema": json.dumps(
            {"type": "integer", "minimum": 1, "maximum": 8, "default": 2, "description": "Ranks"}
        ),
    },
    {"name": "gpus", "schema": {"type": "integer", "minimum": 0, "maximum": 4}},
    {"name": "lr", "schema": {"type": "number", "minimum": 0, "maximum": 1, "default": 0.01}},
    {"name": "tier", "schema": {"type": "string", "enum": ["small", "large"], "default": "small"}},
]


def _template() -> str:
    text = SEED.read_text()
    text = text.replace(
        "replicas: 1\n      template:\n        spec:\n          containers:\n"
        "            - name: worker",
        'replicas: "{{workers}}"\n      template:\n        spec:\n'
        "          containers:\n            - name: worker\n"
        '              resources: {limits: {nvidia.com/gpu: "{{ gpus }}"}}\n'
        '              args: ["--lr={{lr}}", "{{lr}}", "{{tier}}-${run_id}"]',
    )
    assert "{{workers}}" in text and "{{lr}}" in text
    return text


def _render(values, schemas=SCHEMAS, template=None):
    return render_job(
        template if template is not None else _template(),
        macros=MACROS,
        template_variables=values,
        template_variable_schemas=schemas,
    )


def _worker(job):
    return job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]


def test_an_exact_variable_keeps_its_type_and_a_longer_string_gets_text():
    job = _render({"workers": 3, "gpus": "2", "lr": 0.5})
    assert job["spec"]["tasks"][1]["replicas"] == 3
    worker = _worker(job)
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == 2  # a digit string, from Jinja
    assert worker["args"] == ["--lr=0.5", "0.5", "small-k3x9p2qa"]  # default, then the macro


def test_defaults_fill_what_has_no_value():
    job = _render({"gpus": 0})
    assert job["spec"]["tasks"][1]["replicas"] == 2
    assert _worker(job)["args"][0] == "--lr=0.01"


@pytest.mark.parametrize(
    ("values", "variable", "words"),
    [
        ({"gpus": 0, "workers": 9}, "workers", "above its maximum 8"),
        ({"gpus": -1}, "gpus", "below its minimum 0"),
        ({"gpus": 0, "tier": "huge"}, "tier", "not one of its enum"),
        ({"gpus": 1.5}, "gpus", "must be an integer"),
        ({"gpus": True}, "gpus", "must be an integer"),
        ({"gpus": "2; rm -rf"}, "gpus", "must be an integer"),
        ({"gpus": 0, "lr": "fast"}, "lr", "must be a number"),
        ({"gpus": 0, "tier": 7}, "tier", "must be a string"),
        ({}, "gpus", "no value and no default"),
        ({"gpus": 0, "memory": "1Gi"}, "memory", "the template has no variable 'memory'"),
    ],
)
def test_a_value_outside_the_guardrails_names_the_variable_and_the_bound(values, variable, words):
    with pytest.raises(TemplateError) as caught:
        _render(values)
    assert f"template_variables.{variable}" in str(caught.value)
    assert words in str(caught.value)
    assert caught.value.path == f"template_variables.{variable}"


def test_every_broken_guardrail_is_reported_at_once():
    with pytest.raises(TemplateError) as caught:
        _render({"workers": 0, "gpus": 5})
    assert [path for path, _ in caught.value.problems] == [
        "template_variables.workers",
        "template_variables.gpus",
    ]


def test_a_value_is_data_never_structure_nor_a_macro():
    hostile = "x\nspec: {evil: 1}\n${run_id} {{gpus}}"
    schemas = [{"name": "tier", "schema": {"type": "string"}}]
    template = _template().replace('"{{workers}}"', "1").replace('"{{ gpus }}"', "1")
    template = template.replace('"--lr={{lr}}", "{{lr}}", ', "")
    job = _render({"tier": hostile}, schemas=schemas, template=template)
    assert _worker(job)["args"] == [hostile + "-k3x9p2qa"]
    assert "evil" not in job["spec"]


def test_a_variable_no_schema_declares_is_an_error_with_its_place():
    schemas = [s for s in SCHEMAS if s["name"] != "lr"]
    with pytest.raises(TemplateError) as caught:
        _render({"gpus": 0}, schemas=schemas)
    assert "{{lr}} has no schema" in str(caught.value)
    assert caught.value.path == "spec.tasks[1].template.spec.containers[0].args[0]"


def test_values_without_schemas_are_refused_and_no_schemas_leaves_braces_alone():
    with pytest.raises(TemplateError, match="no template_variable_schemas"):
        _render({"gpus": 1}, schemas=None)
    template = _template().replace('"{{workers}}"', "1").replace('"{{ gpus }}"', "1")
    job = _render(None, schemas=None, template=template)
    assert _worker(job)["args"] == ["--lr={{lr}}", "{{lr}}", "{{tier}}-k3x9p2qa"]


@pytest.mark.parametrize(
    ("schema", "words"),
    [
        ({"type": "boolean"}, "W&B's types are integer, number, string"),
        ({"type": "string", "pattern": "^a"}, "'pattern', which this provider does not enforce"),
        ({"type": "integer", "maximum": 2, "default": 3}, "its default breaks its own bounds"),
        ({"type": "string", "minimum": 1}, "only an integer or number variable"),
        ("{not json", "its schema is not JSON"),
    ],
)
def test_a_schema_the_provider_cannot_enforce_is_refused(schema, words):
    with pytest.raises(TemplateError, match=r"template_variables\.v") as caught:
        _render({}, schemas=[{"name": "v", "schema": schema}])
    assert words in str(caught.value)


def test_the_trigger_form_gets_the_queues_own_bounds():
    params = params_from_template_variables(SCHEMAS)
    assert list(params) == ["workers", "gpus", "lr", "tier"]
    assert all(isinstance(p, Param) for p in params.values())
    assert params["workers"].schema == {
        "type": "integer",
        "minimum": 1,
        "maximum": 8,
    }
    assert params["workers"].description == "Ranks"
    assert params["workers"].value == 2
    assert params["tier"].schema["enum"] == ["small", "large"]
    assert not params["gpus"].has_value  # no default: the form asks for one
    with pytest.raises(Exception, match="9 is greater than the maximum of 8"):
        params["workers"].resolve(9)
    assert params["workers"].resolve(8) == 8

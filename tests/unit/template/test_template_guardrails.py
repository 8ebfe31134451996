"""The queue's template variable bounds hold against the run's overrides (#41 item 2): an
override of a field a variable fills is honoured inside that variable's schema and refused
past it, naming the variable, its bound and the override."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.template import TemplateError, load_template
from test_support.template_cases import MACROS, SEED, render_job

SCHEMAS = [
    {"name": "workers", "schema": {"type": "integer", "minimum": 1, "maximum": 4, "default": 2}},
    {"name": "gpus", "schema": {"type": "integer", "minimum": 0, "maximum": 2, "default": 1}},
    {"name": "lr", "schema": {"type": "number", "maximum": 1, "default": 0.1}},
    {"name": "image", "schema": {"type": "string", "enum": ["registry.local/ddp:1", "r/ddp:2"]}},
]


def _template() -> dict[str, Any]:
    """The seed as a queue admin templates its worker task."""
    template = load_template(SEED)
    worker = template["spec"]["tasks"][1]
    worker["replicas"] = "{{workers}}"
    container = worker["template"]["spec"]["containers"][0]
    container["image"] = "{{image}}"
    container["resources"] = {"limits": {"nvidia.com/gpu": "{{gpus}}"}}
    container["env"] = [{"name": "LR", "value": "{{lr}}"}]
    container["command"] = ["python", "train.py", "--lr={{lr}}"]
    return template


def _render(**overrides: Any) -> dict[str, Any]:
    return render_job(
        _template(),
        macros=MACROS,
        template_variables={"image": "registry.local/ddp:1"},
        template_variable_schemas=SCHEMAS,
        **overrides,
    )


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["tasks"][1]


@pytest.mark.parametrize(
    ("override", "field", "words"),
    [
        (
            {"replicas": {"worker": 20}},
            "spec.tasks[1].replicas",
            "the replicas override sets 20: template variable 'workers' is 20, above its maximum 4",
        ),
        (
            {"resources": {"worker": {"limits": {"nvidia.com/gpu": 8}}}},
            'containers[0].resources.limits["nvidia.com/gpu"]',
            "the container_resources override sets 8: template variable 'gpus' is 8, above its "
            "maximum 2",
        ),
        (
            {"resources": {"worker": {"limits": {"nvidia.com/gpu": None}}}},
            'containers[0].resources.limits["nvidia.com/gpu"]',
            "the container_resources override removes what template variable 'gpus' fills",
        ),
        (
            {"env": {"LR": "5"}},
            "containers[0].env[0].value",
            "the env override sets '5': template variable 'lr' is 5, above its maximum 1",
        ),
        (
            {"image": "evil.example/miner:1"},
            "containers[0].image",
            "the image override sets 'evil.example/miner:1': template variable 'image' is "
            "'evil.example/miner:1', not one of its enum",
        ),
        (
            {"command": {"worker": ["python", "train.py", "--lr=9"]}},
            "containers[0].command[2]",
            "the command override sets '--lr=9' where template variable 'lr' fills part of the "
            "text, which no schema can judge",
        ),
    ],
    ids=["replicas", "resources", "resource-removed", "env", "image", "command"],
)
def test_an_override_past_a_variables_bound_is_refused_naming_both(override, field, words):
    with pytest.raises(TemplateError, match="step over the queue's template variable") as info:
        _render(**override)
    [(where, message)] = info.value.problems
    assert where.endswith(field) and message.startswith(words)


def test_an_override_inside_the_bound_is_honoured_as_if_the_variable_had_it():
    job = _render(
        replicas={"worker": 3},
        resources={"worker": {"limits": {"nvidia.com/gpu": 2}}},
        env={"LR": "0.5", "OTHER": "x"},  # a name no variable fills: any value
        image={"worker": "r/ddp:2"},
    )
    worker = _worker(job)
    container = worker["template"]["spec"]["containers"][0]
    assert worker["replicas"] == 3
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert container["env"][:2] == [{"name": "LR", "value": "0.5"}, {"name": "OTHER", "value": "x"}]
    assert container["image"] == "r/ddp:2"


def test_every_override_past_a_bound_is_reported_at_once():
    with pytest.raises(TemplateError) as info:
        _render(replicas={"worker": 5}, resources={"worker": {"limits": {"nvidia.com/gpu": 3}}})
    assert [message.split(":")[0] for _, message in info.value.problems] == [
        "the replicas override sets 5",
        "the container_resources override sets 3",
    ]


def test_fields_no_variable_fills_take_any_override():
    job = _render(replicas={"master": 1}, command={"master": ["python", "eval.py"]})
    assert job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]["command"] == [
        "python",
        "eval.py",
    ]

"""Macros: built-ins, typed values, text formatting, escapes and errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from airflow_volcano_wandb.template import BUILTIN_MACROS, TemplateError
from test_support.template_cases import MACROS, render_job

REPO = Path(__file__).resolve().parents[3]
SEED = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"


def minimal(**container: Any) -> dict[str, Any]:
    """A one-task Volcano Job whose container gets ``container``'s fields."""
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": "job-${run_id}", "annotations": {"note": "${note}"}},
        "spec": {
            "tasks": [
                {
                    "name": "main",
                    "replicas": "${workers}",
                    "template": {
                        "spec": {
                            "containers": [{"name": "main", "image": "${image_uri}", **container}]
                        }
                    },
                }
            ]
        },
    }


def render(template: dict[str, Any], **macros: Any) -> dict[str, Any]:
    return render_job(template, macros={**MACROS, "workers": 2, "note": "n", **macros})


def container(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["tasks"][0]["template"]["spec"]["containers"][0]


def test_builtin_names_match_wandb_launch() -> None:
    assert BUILTIN_MACROS == (
        "image_uri",
        "run_id",
        "run_name",
        "entity_name",
        "project_name",
        "author",
    )


def test_whole_string_macro_keeps_its_type() -> None:
    job = render(minimal(), workers=3)
    assert job["spec"]["tasks"][0]["replicas"] == 3
    job = render(minimal(), workers="4")  # digit strings from forms are counts too
    assert job["spec"]["tasks"][0]["replicas"] == 4


def test_whole_string_macro_can_hold_structures_copied_per_use() -> None:
    resources = {"limits": {"cpu": "2"}}
    template = minimal(resources="${res}")
    template["spec"]["tasks"][0]["template"]["spec"]["containers"].append(
        {"name": "side", "image": "busybox", "resources": "${res}"}
    )
    job = render(template, res=resources)
    first, second = job["spec"]["tasks"][0]["template"]["spec"]["containers"]
    assert first["resources"] == second["resources"] == resources
    assert first["resources"] is not second["resources"] and first["resources"] is not resources


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (True, "true"),
        (False, "false"),
        (3, "3"),
        (0.001, "0.001"),
        (1e-05, "1e-05"),
        (10**30, "1" + "0" * 30),
        ("ünï ${x}", "ünï ${x}"),
    ],
)
def test_values_inside_longer_strings_are_text(value: Any, text: str) -> None:
    job = render(minimal(args=["--v=${v}", "${v}"]), v=value)
    assert container(job)["args"] == [f"--v={text}", text]


def test_typed_values_in_string_fields_become_text() -> None:
    template = minimal(env=[{"name": "N", "value": "${n}"}], workingDir="${n}")
    template["metadata"]["labels"] = {"n": "${n}"}
    job = render(template, n=7, note=True)
    assert container(job)["env"] == [{"name": "N", "value": "7"}]
    assert container(job)["workingDir"] == "7"
    assert job["metadata"]["labels"]["n"] == "7"
    assert job["metadata"]["annotations"]["note"] == "true"


def test_huge_integer_is_fine_as_text_but_not_as_a_number() -> None:
    job = render(minimal(), note=10**40)
    assert job["metadata"]["annotations"]["note"] == str(10**40)
    template = minimal()
    template["spec"]["maxRetry"] = "${n}"
    with pytest.raises(TemplateError, match=r"spec\.maxRetry"):
        render(template, n=10**40)
    with pytest.raises(TemplateError, match="too large"):
        render(minimal(args=["x${n}"]), n=10**5000)


def test_none_is_an_error_never_the_text_none() -> None:
    with pytest.raises(TemplateError, match=r"metadata\.name: macro \$\{run_id\} is None"):
        render(minimal(), run_id=None)
    with pytest.raises(TemplateError, match="is None"):
        render(minimal(args=["${a}"]), a=None)


def test_unused_none_is_fine() -> None:
    assert render(minimal(), author=None)["kind"] == "Job"


def test_unknown_macros_are_listed_with_the_known_ones() -> None:
    with pytest.raises(TemplateError) as info:
        render(minimal(args=["${epochs}", "--lr=${lr}", "${epochs}"]))
    message = str(info.value)
    assert "${epochs} at spec.tasks[0].template.spec.containers[0].args[0]" in message
    assert "${lr} at spec.tasks[0].template.spec.containers[0].args[1]" in message
    assert "known macros: author, entity_name, image_uri, note, project_name, run_id" in message
    assert [p for p, _ in info.value.problems] == [
        "spec.tasks[0].template.spec.containers[0].args[0]",
        "spec.tasks[0].template.spec.containers[0].args[1]",
    ]


def test_builtin_without_a_value_is_reported_as_such() -> None:
    macros = {k: v for k, v in MACROS.items() if k != "image_uri"}
    with pytest.raises(TemplateError, match=r"built-in macro\(s\) without a value.*image_uri"):
        render_job(SEED, macros=macros)


def test_escape_gives_a_literal_macro() -> None:
    job = render(minimal(args=["$${HOME}", "a$${x}b", "$$${run_id}", "$HOME", "cost: $5", "$$"]))
    assert container(job)["args"] == ["${HOME}", "a${x}b", "$${run_id}", "$HOME", "cost: $5", "$$"]


@pytest.mark.parametrize("text", ["${a-b}", "${", "x ${}", "${ run_id }", "${run_id", "${1x}"])
def test_malformed_macro_names_its_path(text: str) -> None:
    with pytest.raises(
        TemplateError,
        match=r"spec\.tasks\[0\]\.template\.spec\.containers\[0\]\.args\[1\]: malformed",
    ):
        render(minimal(args=["ok", text]))


def test_macros_are_never_substituted_in_keys() -> None:
    template = minimal()
    template["metadata"]["labels"] = {"${entity_name}": "x"}
    with pytest.raises(
        TemplateError, match=r"metadata\.labels\[\"\$\{entity_name\}\"\]: macros are not"
    ):
        render(template)


def test_values_are_never_parsed_again() -> None:
    evil = ["x\nspec: {evil: 1}", "{{ 7*7 }}", "${run_id}", "$${run_id}", '"}, {"a": 1']
    for value in evil:
        job = render(minimal(args=["${v}", "pre-${v}"]), v=value)
        assert container(job)["args"] == [value, f"pre-{value}"]
        assert "evil" not in job["spec"]


def test_structures_cannot_be_formatted_inside_text() -> None:
    with pytest.raises(TemplateError, match="cannot be formatted inside a string"):
        render(minimal(args=["--cfg=${cfg}"]), cfg={"a": 1})
    with pytest.raises(TemplateError, match="list"):
        render(minimal(args=["--cfg=${cfg}"]), cfg=[1])


@pytest.mark.parametrize("value", [object(), b"bytes", {1: "non-string key"}, float("nan")])
def test_non_json_values_are_errors(value: Any) -> None:
    with pytest.raises(TemplateError):
        render(minimal(args=["${v}"]), v=value)


@pytest.mark.parametrize("name", ["a-b", "1x", "", "with space"])
def test_invalid_macro_names_are_rejected(name: str) -> None:
    with pytest.raises(TemplateError, match="invalid macro name"):
        render(minimal(), **{name: 1})


def test_macros_must_be_a_mapping() -> None:
    with pytest.raises(TemplateError, match="macros must be a mapping"):
        render_job(SEED, macros=[("run_id", "x")])  # type: ignore[arg-type]


def test_invalid_label_value_from_a_macro_is_rewritten() -> None:
    job = render_job(SEED, macros={**MACROS, "project_name": "My Project: v2"})
    value = job["metadata"]["labels"]["wandb_project"]
    assert value.startswith("My-Project-v2-") and len(value) <= 63


def test_yaml_and_dict_templates_agree_on_typed_macros() -> None:
    text = yaml.safe_dump(minimal(args=["${v}"]))
    assert render(yaml.safe_load(text), v=5) == render(minimal(args=["${v}"]), v=5)
    assert container(render(minimal(args=["${v}"]), v=5))["args"] == ["5"]

"""``${NAME}`` macros from the environment of the process that renders (#41 item 3): only the
names ``macros_from_env`` lists, and no error ever shows a value."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_volcano_wandb.template import TemplateError, load_template
from test_support.template_cases import MACROS, SEED, render_job

SECRET = "s3cr3t-value-of-the-worker"


@pytest.fixture(autouse=True)
def worker_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_REGISTRY", "registry.corp.example")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.delenv("UNSET_NAME", raising=False)


def _template(image: str = "${MY_REGISTRY}/ddp:1", **env: str) -> dict[str, Any]:
    template = load_template(SEED)
    container = template["spec"]["tasks"][1]["template"]["spec"]["containers"][0]
    container["image"] = image
    container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return template


def _worker(job: dict[str, Any]) -> dict[str, Any]:
    return job["spec"]["tasks"][1]["template"]["spec"]["containers"][0]


def test_a_listed_name_is_filled_from_the_environment_and_macros_win():
    job = render_job(_template(), macros=MACROS, macros_from_env=["MY_REGISTRY"])
    assert _worker(job)["image"] == "registry.corp.example/ddp:1"
    given = {**MACROS, "MY_REGISTRY": "registry.dag.example"}
    job = render_job(_template(), macros=given, macros_from_env=["MY_REGISTRY"])
    assert _worker(job)["image"] == "registry.dag.example/ddp:1"


def test_a_name_not_listed_stays_unknown_and_the_error_names_the_option_not_the_value():
    template = _template(KEY="${AWS_SECRET_ACCESS_KEY}")
    with pytest.raises(TemplateError) as info:
        render_job(template, macros=MACROS, macros_from_env=["MY_REGISTRY"])
    text = str(info.value)
    assert "unknown macro(s): ${AWS_SECRET_ACCESS_KEY} at spec.tasks[1]" in text
    assert "must be listed in macros_from_env" in text
    assert SECRET not in text and "registry.corp.example" not in text


def test_a_listed_name_the_environment_lacks_is_named_as_such():
    with pytest.raises(TemplateError) as info:
        render_job(_template("${UNSET_NAME}/ddp:1"), macros=MACROS, macros_from_env=["UNSET_NAME"])
    assert "listed in macros_from_env but not set in the environment" in str(info.value)
    assert "${UNSET_NAME} at spec.tasks[1]" in str(info.value)


@pytest.mark.parametrize(
    ("names", "words"),
    [
        (["MY_*"], "takes names, not patterns: 'MY_\\*'"),
        (["AWS_.*"], "takes names, not patterns"),
        ("MY_REGISTRY", "must be a list of names, not str"),
        (["run_id"], "names the built-in macro\\(s\\) run_id"),
    ],
)
def test_macros_from_env_takes_names_only(names, words):
    with pytest.raises(TemplateError, match=words):
        render_job(_template(), macros=MACROS, macros_from_env=names)

"""Property-based tests: substitution is structural, and bad input only ever raises
TemplateError (never KeyError, TypeError, RecursionError, ...)."""

from __future__ import annotations

import copy
import math
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from airflow_volcano_wandb.template import TemplateError, naming
from test_support.hostile import hostile_text
from test_support.template_cases import MACROS, SEED, render_job

SEED_TEMPLATE = yaml.safe_load(SEED.read_text())
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Text that tries hard to break out: YAML/JSON/Jinja/shell metacharacters, macro syntax,
# newlines, unicode, plus arbitrary characters.
nasty_text = hostile_text(8, 8)
scalars = st.one_of(
    nasty_text,
    st.integers(),
    st.integers(min_value=-(10**60), max_value=10**60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
json_values = st.recursive(
    st.one_of(st.none(), scalars),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(nasty_text, inner, max_size=3)
    ),
    max_leaves=8,
)


def leaves(node: Any, path: tuple = ()) -> dict[tuple, Any]:
    if isinstance(node, dict):
        out: dict[tuple, Any] = {}
        for key, value in node.items():
            out.update(leaves(value, (*path, key)))
        return out if node else {path: {}}
    if isinstance(node, list):
        out = {}
        for i, value in enumerate(node):
            out.update(leaves(value, (*path, i)))
        return out if node else {path: []}
    return {path: node}


def with_macro_everywhere() -> tuple[dict[str, Any], dict[tuple, str]]:
    """The seed plus ``${v}`` in each kind of free-text place; returns the template and, for
    each place, a format string for what it must become ({} = the value as text)."""
    template = copy.deepcopy(SEED_TEMPLATE)
    template["metadata"]["annotations"] = {"note": "${v}", "wrapped": "<${v}>"}
    worker = template["spec"]["tasks"][1]
    worker["template"]["metadata"] = {"annotations": {"v": "${v}"}}
    container = worker["template"]["spec"]["containers"][0]
    container["args"] = ["--v=${v}", "${v}", "$${v}"]
    container["env"] = [{"name": "V", "value": "${v}"}]
    ctn = ("spec", "tasks", 1, "template", "spec", "containers", 0)
    places = {
        ("metadata", "annotations", "note"): "{}",
        ("metadata", "annotations", "wrapped"): "<{}>",
        ("spec", "tasks", 1, "template", "metadata", "annotations", "v"): "{}",
        (*ctn, "args", 0): "--v={}",
        (*ctn, "args", 1): "{}",
        (*ctn, "env", 0, "value"): "{}",
    }
    return template, places


def as_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return (
        value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    )


@SETTINGS
@given(value=scalars)
def test_substitution_is_structural(value: Any) -> None:
    template, places = with_macro_everywhere()
    reference = leaves(render_job(template, macros={**MACROS, "v": "SENTINEL"}))
    try:
        job = render_job(template, macros={**MACROS, "v": value})
    except TemplateError:
        assert isinstance(value, float) and not math.isfinite(value)
        return
    rendered = leaves(job)
    assert rendered.keys() == reference.keys()  # same shape: same paths, nothing added
    for path, expected in reference.items():
        if path in places:
            assert rendered[path] == places[path].format(as_text(value))
        else:
            assert rendered[path] == expected, path  # nothing else moved
    literal = ("spec", "tasks", 1, "template", "spec", "containers", 0, "args", 2)
    assert rendered[literal] == "${v}"


@SETTINGS
@given(text=nasty_text)
def test_arbitrary_template_strings_render_or_raise_template_error(text: str) -> None:
    template = copy.deepcopy(SEED_TEMPLATE)
    template["metadata"]["annotations"] = {"a": text}
    try:
        job = render_job(template, macros={**MACROS, "v": "V"})
    except TemplateError:
        assert "${" in text
        return
    if "$" not in text:
        assert job["metadata"]["annotations"]["a"] == text


@SETTINGS
@given(run_id=st.one_of(nasty_text, st.text(min_size=30, max_size=300)))
def test_any_run_id_gives_a_valid_job_name(run_id: str) -> None:
    job = render_job(SEED_TEMPLATE, macros={**MACROS, "run_id": run_id})
    name = job["metadata"]["name"]
    assert naming.is_dns1035_label(name) and len(name) <= 51
    labels = job["metadata"]["labels"]
    assert all(naming.is_label_value(v) for v in labels.values())


def _macro_in_replicas_label_and_args() -> dict[str, Any]:
    """The seed with ``${v}`` as the worker's replicas, a label and two container args."""
    template = copy.deepcopy(SEED_TEMPLATE)
    template["metadata"]["labels"]["v"] = "${v}"
    template["spec"]["tasks"][1]["replicas"] = "${v}"
    template["spec"]["tasks"][1]["template"]["spec"]["containers"][0]["args"] = ["${v}", "x${v}"]
    return template


#: The most replicas a task may ask for (the validator's cap).
MAX_REPLICAS = 1024
#: A whole ``${v}`` in ``replicas`` takes an int, or text of ASCII digits (the Trigger form
#: sends text); as a label value it must stay within 63 characters.
valid_replicas = st.one_of(
    st.integers(0, MAX_REPLICAS),
    st.integers(0, MAX_REPLICAS).map(str),
    st.integers(0, MAX_REPLICAS).map(lambda n: f"{n:04d}"),
)


def is_valid_replicas(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    if isinstance(value, str):
        ascii_digits = value.isascii() and value.isdigit() and len(value) <= 63
        return ascii_digits and int(value) <= MAX_REPLICAS
    return isinstance(value, int) and 0 <= value <= MAX_REPLICAS


# Where a refused ``${v}`` may be named: the replicas it fills, the arg it is formatted into,
# or the label it becomes.
MACRO_PLACES = (
    "spec.tasks[1].replicas",
    "spec.tasks[1].template.spec.containers[0].args",
    "metadata.labels",
)


@SETTINGS
@given(value=valid_replicas)
def test_a_valid_macro_value_renders_as_a_number_and_as_text(value: Any) -> None:
    job = render_job(_macro_in_replicas_label_and_args(), macros={**MACROS, "v": value})
    worker = job["spec"]["tasks"][1]
    assert worker["replicas"] == int(value)
    assert worker["template"]["spec"]["containers"][0]["args"] == [str(value), f"x{value}"]
    assert job["metadata"]["labels"]["v"] == str(value)


@SETTINGS
@given(value=json_values.filter(lambda v: not is_valid_replicas(v)))
def test_an_invalid_macro_value_raises_template_error_naming_its_place(value: Any) -> None:
    try:
        render_job(_macro_in_replicas_label_and_args(), macros={**MACROS, "v": value})
    except TemplateError as refused:
        message = str(refused)
        assert any(place in message for place in MACRO_PLACES), message
    else:
        raise AssertionError(f"{value!r} rendered as replicas")


override_values = st.one_of(json_values, st.just({"worker": 3}), st.just({"master": "1"}))


@SETTINGS
@given(
    replicas=override_values,
    image=st.one_of(st.none(), override_values),
    env=st.one_of(st.none(), override_values),
    resources=st.one_of(st.none(), override_values),
    command=st.one_of(st.none(), override_values),
    labels=st.one_of(st.none(), override_values),
    pod_annotations=st.one_of(st.none(), override_values),
    name=st.one_of(st.none(), nasty_text),
)
def test_any_overrides_render_or_raise_template_error(**overrides: Any) -> None:
    before = copy.deepcopy(overrides)
    try:
        job = render_job(SEED_TEMPLATE, macros=MACROS, **overrides)
    except TemplateError:
        pass
    else:
        assert naming.is_dns1035_label(job["metadata"]["name"])
        assert all(type(t["replicas"]) is int for t in job["spec"]["tasks"])
    assert overrides == before or any(  # NaN != NaN; otherwise the caller's input is untouched
        isinstance(v, float) and math.isnan(v) for v in leaves(before).values()
    )


def seed_leaf_paths() -> list[tuple]:
    return list(leaves(SEED_TEMPLATE))


@SETTINGS
@given(data=st.data())
def test_any_mutated_template_renders_or_raises_template_error(data: st.DataObject) -> None:
    template = copy.deepcopy(SEED_TEMPLATE)
    path = data.draw(st.sampled_from(seed_leaf_paths()))
    assume(path not in {("kind",), ("apiVersion",)})
    node = template
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = data.draw(json_values)
    try:
        job = render_job(template, macros=MACROS)
    except TemplateError:
        return
    assert naming.is_dns1035_label(job["metadata"]["name"])

"""airflow_volcano_wandb.template.naming: deterministic, valid Kubernetes names."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from airflow_volcano_wandb.template import naming

DNS1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?\Z")
HASH_SUFFIX = re.compile(r"-?[0-9a-f]{8}\Z")

# Text full of characters names cannot hold: separators, unicode, YAML/Jinja metacharacters.
awkward_text = st.text(
    alphabet=st.one_of(st.sampled_from("aZ09-_.:/+@ ${}[]\n\t#|*&!%'\"İßé中😀"), st.characters()),
    max_size=120,
)


@pytest.mark.parametrize("value", ["a", "train-mlp", "0abc", "a" * 63])
def test_valid_dns1123_label_is_unchanged(value: str) -> None:
    assert naming.dns1123_label(value) == value


@pytest.mark.parametrize(
    ("value", "prefix"),
    [
        ("Train_MLP", "train-mlp-"),
        ("my dag/v2", "my-dag-v2-"),
        ("--edge--", "edge-"),
        ("a" * 64, "a" * 54 + "-"),
    ],
)
def test_invalid_dns1123_label_is_rewritten_with_hash(value: str, prefix: str) -> None:
    result = naming.dns1123_label(value)
    assert result.startswith(prefix)
    assert result == prefix + naming.short_hash(value)
    assert DNS1123.match(result)


def test_dns1123_label_of_nothing_usable_is_the_hash() -> None:
    assert naming.dns1123_label("") == naming.short_hash("")
    assert naming.dns1123_label("___") == naming.short_hash("___")


def test_dns1123_label_respects_max_length_and_differs_per_input() -> None:
    a = naming.dns1123_label("x" * 100 + "a", max_length=20)
    b = naming.dns1123_label("x" * 100 + "b", max_length=20)
    assert len(a) <= 20 and len(b) <= 20
    assert a != b
    assert a == naming.dns1123_label("x" * 100 + "a", max_length=20)  # deterministic


def test_case_folding_is_lossy_so_it_is_hashed() -> None:
    # "Run" and "run" are distinct Airflow ids: they must not collapse onto one job name.
    assert naming.dns1123_label("Run") != naming.dns1123_label("run") == "run"


@pytest.mark.parametrize("max_length", [9, 64, 0])
def test_max_length_out_of_range_is_rejected(max_length: int) -> None:
    with pytest.raises(ValueError, match="max_length"):
        naming.dns1123_label("abc", max_length=max_length)


def test_non_string_is_a_type_error() -> None:
    with pytest.raises(TypeError):
        naming.dns1123_label(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        naming.label_value(None)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "start"), [("123", "x123-"), ("", "x-"), ("9-job", "x9-job-")])
def test_dns1035_label_starts_with_a_letter(value: str, start: str) -> None:
    result = naming.dns1035_label(value)
    assert result.startswith(start)
    assert DNS1035.match(result)


@pytest.mark.parametrize("value", ["", "a", "My-Project", "v1.2_3", "A" * 63])
def test_valid_label_value_is_unchanged(value: str) -> None:
    assert naming.label_value(value) == value


@pytest.mark.parametrize(
    "value",
    ["My Project", "manual__2025-01-01T00:00:00+00:00", "-x-", "é", "a" * 64, "x\ny: 1"],
)
def test_invalid_label_value_is_made_valid(value: str) -> None:
    result = naming.label_value(value)
    assert LABEL_VALUE.match(result) and len(result) <= 63
    assert result.endswith(naming.short_hash(value))


@pytest.mark.parametrize(
    ("key", "valid"),
    [
        ("app", True),
        ("app.kubernetes.io/name", True),
        ("sim.airflow-volcano-wandb.io/duration", True),
        ("wandb_entity", True),
        ("", False),
        ("/name", False),
        ("Bad_Prefix/name", False),
        ("a/b/c", False),
        ("x" * 64, False),
        ("-x", False),
    ],
)
def test_is_qualified_name(key: str, valid: bool) -> None:
    assert naming.is_qualified_name(key) is valid


def test_max_job_name_length_constant_leaves_room_for_pods() -> None:
    assert naming.MAX_JOB_NAME_LENGTH == 45
    pod = naming.pod_name("j" * naming.MAX_JOB_NAME_LENGTH, "t" * naming.TASK_NAME_BUDGET, 1023)
    assert len(pod) == 63


def test_max_job_name_length_for_tasks() -> None:
    assert naming.max_job_name_length(["master", "worker"]) == 63 - 2 - 6 - 4
    assert naming.max_job_name_length(["master"], max_replicas=10) == 63 - 2 - 6 - 1
    assert naming.max_job_name_length([], max_replicas=1) == 63 - 2 - 0 - 1


def test_job_name_is_deterministic_hashed_and_short() -> None:
    name = naming.job_name("train_dag", "train", "manual__2025-01-01T00:00:00+00:00", 3)
    assert name == naming.job_name("train_dag", "train", "manual__2025-01-01T00:00:00+00:00", 3)
    assert name.startswith("train-dag-train-manual-2025")
    assert len(name) <= naming.MAX_JOB_NAME_LENGTH and DNS1035.match(name)
    assert naming.job_name("a-b", "c") != naming.job_name("a", "b-c")
    assert naming.job_name("d", "t", "r", 0) != naming.job_name("d", "t", "r", 1)
    assert naming.job_name("1dag").startswith("x1dag-")


def test_job_name_rejects_bad_parts() -> None:
    with pytest.raises(ValueError):
        naming.job_name()
    with pytest.raises(TypeError):
        naming.job_name("d", True)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        naming.job_name("d", None)  # type: ignore[arg-type]


def test_fit_job_name() -> None:
    assert naming.fit_job_name("wandb-job-abc", ["master", "worker"]) == "wandb-job-abc"
    long = "wandb-job-" + "r" * 60
    fitted = naming.fit_job_name(long, ["master", "worker"])
    assert len(fitted) == 51 and fitted.endswith(naming.short_hash(long))
    assert naming.fit_job_name("Wandb-Job", ["master"]).startswith("wandb-job-")
    with pytest.raises(ValueError, match="shorter task names"):
        naming.fit_job_name("x" * 40, ["t" * 50])


@settings(max_examples=200, deadline=None)
@given(value=awkward_text, max_length=st.integers(min_value=10, max_value=63))
def test_dns_labels_are_always_valid(value: str, max_length: int) -> None:
    for fn, pattern in ((naming.dns1123_label, DNS1123), (naming.dns1035_label, DNS1035)):
        result = fn(value, max_length)
        assert pattern.match(result), (value, result)
        assert len(result) <= max_length
        assert fn(value, max_length) == result
        if result != value:
            assert HASH_SUFFIX.search(result)


@settings(max_examples=200, deadline=None)
@given(value=awkward_text)
def test_label_values_are_always_valid(value: str) -> None:
    result = naming.label_value(value)
    assert LABEL_VALUE.match(result) and len(result) <= 63
    assert (result == value) == naming.is_label_value(value)


@settings(max_examples=200, deadline=None)
@given(parts=st.lists(st.one_of(awkward_text, st.integers()), min_size=1, max_size=4))
def test_job_names_are_always_valid(parts: list) -> None:
    result = naming.job_name(*parts)
    assert DNS1035.match(result) and len(result) <= naming.MAX_JOB_NAME_LENGTH


def test_docstring_examples_hold() -> None:
    import doctest

    assert doctest.testmod(naming).failed == 0

"""Unit tests for the pure sweep module: search spaces to expand_kwargs lists, and the winner."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_volcano_wandb.wandb.sweep import (
    Metric,
    SweepError,
    best,
    expand_kwargs,
    metric_of,
    points,
)

GRID = {
    "method": "grid",
    "parameters": {
        "lr": {"values": [0.01, 0.1, 0.5]},
        "hidden_size": {"values": [32, 64]},
        "epochs": {"value": 3},
    },
}


def test_grid_is_every_combination_in_configuration_order():
    assert points(GRID) == [
        {"lr": 0.01, "hidden_size": 32, "epochs": 3},
        {"lr": 0.01, "hidden_size": 64, "epochs": 3},
        {"lr": 0.1, "hidden_size": 32, "epochs": 3},
        {"lr": 0.1, "hidden_size": 64, "epochs": 3},
        {"lr": 0.5, "hidden_size": 32, "epochs": 3},
        {"lr": 0.5, "hidden_size": 64, "epochs": 3},
    ]


def test_grid_enumerates_an_int_uniform_range_and_honours_run_cap():
    config = {"method": "grid", "parameters": {"n": {"min": 2, "max": 5}}, "run_cap": 3}
    assert points(config) == [{"n": 2}, {"n": 3}, {"n": 4}]
    config["run_cap"] = 100  # more than the grid: the grid
    assert [p["n"] for p in points(config)] == [2, 3, 4, 5]


@pytest.mark.parametrize(
    "spec",
    [
        {"min": 0.1, "max": 1.0},
        {"min": 1, "max": 9, "distribution": "q_uniform", "q": 2},
        {"min": 1e-4, "max": 1e-1, "distribution": "log_uniform_values"},
        {"mu": 0, "sigma": 1},
    ],
)
def test_grid_refuses_continuous_parameters_naming_them(spec):
    with pytest.raises(SweepError, match=r"parameters\.lr\.distribution: a grid cannot"):
        points({"method": "grid", "parameters": {"lr": spec}})


RANDOM = {
    "method": "random",
    "run_cap": 20,
    "parameters": {
        "lr": {"distribution": "log_uniform_values", "min": 1e-4, "max": 1e-1},
        "dropout": {"min": 0.0, "max": 0.5},
        "layers": {"min": 1, "max": 4},
        "batch": {"distribution": "q_uniform", "min": 16, "max": 256, "q": 16},
        "scale": {"distribution": "q_uniform", "min": 0.0, "max": 1.0, "q": 0.1},
        "opt": {"values": ["sgd", "adam"], "probabilities": [0.25, 0.75]},
        "wd": {"distribution": "log_uniform", "min": -9.0, "max": -2.0},
        "noise": {"distribution": "normal", "mu": 1.0, "sigma": 0.1},
        "qn": {"distribution": "q_normal", "mu": 10, "sigma": 3, "q": 1},
        "ln": {"distribution": "log_normal", "mu": 0, "sigma": 0.5},
        "qln": {"distribution": "q_log_normal", "mu": 2, "sigma": 0.5, "q": 0.5},
        "qlv": {"distribution": "q_log_uniform_values", "min": 1, "max": 1000, "q": 10},
        "tag": {"value": "v1"},
    },
}


def test_random_draws_run_cap_points_inside_every_distribution():
    drawn = points(RANDOM, seed=7)
    assert len(drawn) == 20
    for p in drawn:
        assert 1e-4 <= p["lr"] <= 1e-1
        assert 0.0 <= p["dropout"] <= 0.5 and isinstance(p["dropout"], float)
        assert p["layers"] in (1, 2, 3, 4)
        assert p["batch"] % 16 == 0 and isinstance(p["batch"], int) and 16 <= p["batch"] <= 256
        assert math.isclose(p["scale"] * 10, round(p["scale"] * 10)) and len(str(p["scale"])) <= 4
        assert p["opt"] in ("sgd", "adam")
        assert math.exp(-9) <= p["wd"] <= math.exp(-2)
        assert p["ln"] > 0 and p["qln"] % 0.5 == 0
        assert isinstance(p["qn"], int) and p["qlv"] % 10 == 0
        assert p["tag"] == "v1"
    assert {p["opt"] for p in drawn} == {"sgd", "adam"}


@given(st.integers(min_value=0, max_value=2**32))
def test_random_is_deterministic_for_a_seed(seed):
    assert points(RANDOM, seed=seed) == points(RANDOM, seed=seed)


def test_the_seed_changes_the_points_and_the_configurations_seed_is_the_default():
    assert points(RANDOM, seed=1) != points(RANDOM, seed=2)
    assert points({**RANDOM, "seed": 5}) == points(RANDOM, seed=5)
    assert points(RANDOM) == points(RANDOM, seed=0)


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({**GRID, "method": "bayes"}, r"method: 'bayes' .*sweep controller"),
        ({**GRID, "method": "hyperband"}, r"method: must be 'grid' or 'random'"),
        ({**GRID, "early_terminate": {"type": "hyperband"}}, r"early_terminate: "),
        ({**GRID, "sweeps": 1}, r"unknown sweep configuration key\(s\): 'sweeps'"),
        ({**GRID, "run_cap": 0}, r"run_cap: must be a positive integer"),
        ({**RANDOM, "run_cap": None}, r"run_cap: a random search has no end"),
        ({**RANDOM, "seed": "x"}, r"seed: must be an integer"),
        ({"method": "grid", "parameters": {}}, r"parameters: needs at least one"),
        ({"method": "grid", "parameters": {"a": 3}}, r"parameters\.a: must be a mapping"),
        (
            {"method": "grid", "parameters": {"a": {"parameters": {"b": {"value": 1}}}}},
            r"parameters\.a\.parameters: nested",
        ),
        ({"method": "grid", "parameters": {"a": {"vals": [1]}}}, r"parameters\.a: unknown key"),
        ({"method": "grid", "parameters": {"a": {}}}, r"parameters\.a: needs value, values"),
        (
            {"method": "random", "run_cap": 1, "parameters": {"a": {"distribution": "beta"}}},
            r"parameters\.a\.distribution: 'beta' is not supported",
        ),
        ({"method": "grid", "parameters": {"a": {"values": []}}}, r"parameters\.a\.values: "),
        (
            {"method": "grid", "parameters": {"a": {"distribution": "categorical"}}},
            r"parameters\.a\.values: required",
        ),
        ({"method": "grid", "parameters": {"a": {"min": 5, "max": 1}}}, r"parameters\.a: min"),
        (
            {"method": "random", "run_cap": 1, "parameters": {"a": {"min": "1", "max": 2}}},
            r"parameters\.a\.min: must be a finite number",
        ),
        (
            {
                "method": "grid",
                "parameters": {"a": {"distribution": "int_uniform", "min": 1.5, "max": 3}},
            },
            r"parameters\.a: int_uniform needs integer",
        ),
        (
            {
                "method": "random",
                "run_cap": 1,
                "parameters": {"a": {"distribution": "log_uniform_values", "min": 0, "max": 1}},
            },
            r"parameters\.a\.min: log_uniform_values needs min > 0",
        ),
        (
            {"method": "random", "run_cap": 1, "parameters": {"a": {"mu": 0, "sigma": 0}}},
            r"parameters\.a\.sigma: must be positive",
        ),
        (
            {
                "method": "random",
                "run_cap": 1,
                "parameters": {"a": {"distribution": "q_uniform", "min": 0, "max": 1, "q": 0}},
            },
            r"parameters\.a\.q: must be positive",
        ),
        (
            {
                "method": "random",
                "run_cap": 1,
                "parameters": {"a": {"values": [1, 2], "probabilities": [0.5, 0.6]}},
            },
            r"parameters\.a\.probabilities: needs 2",
        ),
        ([("method", "grid")], r"must be a mapping"),
    ],
)
def test_unsupported_or_malformed_input_names_the_field(config, field):
    with pytest.raises(SweepError, match=field):
        points(config)


def test_expand_kwargs_gives_env_text_or_macros_per_point():
    sweep_points = [
        {"lr": 0.01, "opt": "adam", "warm": True},
        {"lr": 1, "opt": "sgd", "warm": False},
    ]
    assert expand_kwargs(sweep_points, replicas={"worker": 2}) == [
        {
            "env": {"TRAIN_LR": "0.01", "TRAIN_OPT": "adam", "TRAIN_WARM": "true"},
            "replicas": {"worker": 2},
        },
        {
            "env": {"TRAIN_LR": "1", "TRAIN_OPT": "sgd", "TRAIN_WARM": "false"},
            "replicas": {"worker": 2},
        },
    ]
    assert expand_kwargs(sweep_points, to="macros")[1] == {
        "macros": {"lr": 1, "opt": "sgd", "warm": False}
    }
    assert expand_kwargs([{"lr": 0.1}], env_prefix="")[0] == {"env": {"LR": "0.1"}}


def test_expand_kwargs_hands_a_point_over_as_the_runs_config():
    """As W&B Launch does: the values as they are, for ``wandb.config``; each map index its own
    mapping, so one run's config never changes another's."""
    sweep_points = [{"lr": 0.01, "warm": True}, {"lr": 1, "warm": False}]
    kwargs = expand_kwargs(sweep_points, to="run_config", replicas={"worker": 2})
    assert kwargs == [
        {"run_config": {"lr": 0.01, "warm": True}, "replicas": {"worker": 2}},
        {"run_config": {"lr": 1, "warm": False}, "replicas": {"worker": 2}},
    ]
    assert kwargs[0]["run_config"] is not sweep_points[0]


def test_expand_kwargs_refuses_a_target_it_fills_or_does_not_know():
    with pytest.raises(SweepError, match=r"env: is filled from the sweep points"):
        expand_kwargs([{"lr": 1}], env={"A": "b"})
    with pytest.raises(SweepError, match=r"to: must be one of 'run_config', 'env', 'macros'"):
        expand_kwargs([{"lr": 1}], to="args")


def test_metric_of_reads_the_metric_block():
    assert metric_of({"metric": {"name": "eval/loss", "goal": "minimize"}}) == Metric(
        "eval/loss", "minimize"
    )
    assert metric_of({"metric": {"name": "eval/accuracy"}}).goal == "maximize"
    with pytest.raises(SweepError, match=r"metric: needs a mapping"):
        metric_of({})
    with pytest.raises(SweepError, match=r"metric\.goal: must be"):
        metric_of({"metric": {"name": "x", "goal": "max"}})


def test_best_by_direction_passing_over_runs_without_a_number():
    summaries = [
        {"acc": 0.7},
        None,
        {"acc": 0.9},
        {"acc": float("nan")},
        {"other": 1.0},
        {"acc": "0.99"},
        {"acc": True},
        {"acc": 0.9},
        {"acc": 0.2},
    ]
    assert best(summaries, Metric("acc")) == 2  # a tie goes to the lower index
    assert best(summaries, Metric("acc", "minimize")) == 8
    assert best([None, {}], Metric("acc")) is None
    with pytest.raises(SweepError, match=r"metric\.goal"):
        best([], Metric("acc", "up"))


@given(
    st.lists(st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False)), max_size=12)
)
def test_best_is_the_max_or_min_of_the_numbers(values):
    summaries = [None if v is None else {"m": v} for v in values]
    numbers = [v for v in values if v is not None]
    top = best(summaries, Metric("m"))
    low = best(summaries, Metric("m", "minimize"))
    if not numbers:
        assert top is None and low is None
    else:
        assert values[top] == max(numbers) and values[low] == min(numbers)

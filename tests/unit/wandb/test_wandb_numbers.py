"""Numbers read from W&B's loosely typed JSON (wandb/numbers.py)."""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.wandb.numbers import finite_number


@pytest.mark.parametrize(
    ("value", "as_int", "as_float"),
    [(7, 7, 7.0), (7.9, 7, 7.9), (-2, -2, -2.0), (0, 0, 0.0)],
)
def test_a_finite_number_is_read_as_the_kind_asked(value, as_int, as_float) -> None:
    assert (finite_number(value, int), finite_number(value, float)) == (as_int, as_float)
    assert type(finite_number(value, int)) is int and type(finite_number(value, float)) is float


@pytest.mark.parametrize(
    "value", [True, False, "7", None, float("nan"), float("inf"), -float("inf"), {"v": 1}, [1]]
)
def test_anything_else_is_no_number(value) -> None:
    assert finite_number(value, int) is None and finite_number(value, float) is None

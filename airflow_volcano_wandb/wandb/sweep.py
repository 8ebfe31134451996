"""Hyperparameter search spaces, W&B sweep style, as lists for Airflow's dynamic task mapping.

A W&B sweep configuration is turned into its points (one dict of hyperparameters each) and
those into the keyword dicts ``VolcanoPyTorchJobOperator.partial(...).expand_kwargs(...)``
maps over: one Volcano job and one W&B run per point; :func:`best` picks the winner by the
same configuration's ``metric``. Pure: no Airflow, no HTTP, no ``wandb``. Only what can be
decided before any run is done is supported (``grid``, ``random``); ``bayes`` and
``early_terminate`` need W&B's sweep controller and are refused. ``docs/sweeps.md`` lists the
parameters and distributions, with W&B's names and defaults.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from airflow_volcano_wandb.wandb.numbers import finite_number

# Top-level keys of a W&B sweep configuration that change nothing about the points.
_IGNORED_KEYS = {"name", "description", "program", "command", "project", "entity", "metric"}
_KNOWN_KEYS = _IGNORED_KEYS | {"method", "parameters", "run_cap", "seed", "early_terminate"}

DISTRIBUTIONS: tuple[str, ...] = (
    "constant",
    "categorical",
    "int_uniform",
    "uniform",
    "q_uniform",
    "log_uniform",
    "log_uniform_values",
    "q_log_uniform_values",
    "normal",
    "q_normal",
    "log_normal",
    "q_log_normal",
)
#: The distributions a grid cannot enumerate.
CONTINUOUS: frozenset[str] = frozenset(DISTRIBUTIONS) - {"constant", "categorical", "int_uniform"}
_PARAM_KEYS = {"value", "values", "probabilities", "distribution", "min", "max", "q", "mu", "sigma"}
_GOALS = ("maximize", "minimize")
#: Where :func:`expand_kwargs` puts a point: the operator's keyword that carries it.
_TARGETS = ("run_config", "env", "macros")


class SweepError(ValueError):
    """A sweep configuration this module cannot turn into points; names the field."""


@dataclass(frozen=True)
class Metric:
    """The metric that decides the best run: its summary key and whether more is better."""

    name: str
    goal: str = "maximize"


def points(config: Mapping[str, Any], *, seed: int | None = None) -> list[dict[str, Any]]:
    """Return the hyperparameter points of a W&B-style sweep configuration, in a fixed order.

    ``grid``: every combination, the first parameter varying slowest (the configuration's
    order), cut to ``run_cap`` when given. ``random``: ``run_cap`` draws from a generator
    seeded with ``seed`` (the argument, else the configuration's ``seed``, else 0), so the
    same configuration and seed always give the same points.

    :param config: the sweep configuration (``method``, ``parameters``, ``run_cap``, and
        optionally ``seed``; ``name``, ``metric``, ``program`` and the like are ignored).
    :param seed: the random seed; overrides the configuration's ``seed``.
    :raises SweepError: for anything unsupported or malformed, naming the field.
    """
    if not isinstance(config, Mapping):
        raise SweepError(f"a sweep configuration must be a mapping, got {type(config).__name__}")
    unknown = sorted(set(config) - _KNOWN_KEYS)
    if unknown:
        raise SweepError(f"unknown sweep configuration key(s): {', '.join(map(repr, unknown))}")
    if "early_terminate" in config:
        raise SweepError(
            "early_terminate: stopping runs early needs W&B's sweep controller "
            "(wandb sweep + wandb agent); remove it to run the sweep from Airflow"
        )
    method = config.get("method")
    if method == "bayes":
        raise SweepError(
            "method: 'bayes' chooses each point from the finished runs, which needs W&B's "
            "sweep controller (wandb sweep + wandb agent); use 'grid' or 'random' here"
        )
    if method not in ("grid", "random"):
        raise SweepError(f"method: must be 'grid' or 'random', got {method!r}")
    run_cap = config.get("run_cap")
    if run_cap is not None and (not _is_int(run_cap) or run_cap < 1):
        raise SweepError(f"run_cap: must be a positive integer, got {run_cap!r}")
    parameters = config.get("parameters")
    if not isinstance(parameters, Mapping) or not parameters:
        raise SweepError("parameters: needs at least one parameter, as a mapping")
    specs = {name: _parameter(name, spec) for name, spec in parameters.items()}
    if method == "grid":
        return _grid(specs, run_cap)
    if run_cap is None:
        raise SweepError("run_cap: a random search has no end of its own; set run_cap")
    if seed is None:
        seed = config.get("seed", 0)
    if not _is_int(seed):
        raise SweepError(f"seed: must be an integer, got {seed!r}")
    rng = random.Random(seed)
    return [{name: _draw(spec, rng) for name, spec in specs.items()} for _ in range(run_cap)]


def expand_kwargs(
    sweep_points: Sequence[Mapping[str, Any]],
    *,
    to: str = "env",
    env_prefix: str = "TRAIN_",
    **fixed: Any,
) -> list[dict[str, Any]]:
    """Return one operator keyword dict per point, for ``.expand_kwargs(...)``.

    ``to="run_config"`` gives each point as the run's ``run_config``, values unchanged: the
    trainer reads them from ``wandb.config``, as a W&B Launch job or a sweep agent's run does,
    with no change to its code. ``to="env"`` (the default) gives each point as container env
    ``<env_prefix><NAME>`` (``lr`` -> ``TRAIN_LR``, the example trainer's fallback), values as
    JSON text (``0.01``, ``true``; strings as they are); ``to="macros"`` gives each point as
    template ``${macros}``, values unchanged.

    :param sweep_points: the points, e.g. from :func:`points`.
    :param to: ``"run_config"``, ``"env"`` or ``"macros"``.
    :param env_prefix: prepended to each upper-cased name with ``to="env"``.
    :param fixed: further keyword arguments every map index gets as they are.
    """
    if to not in _TARGETS:
        raise SweepError(f"to: must be one of {', '.join(map(repr, _TARGETS))}, got {to!r}")
    if to in fixed:
        raise SweepError(f"{to}: is filled from the sweep points; pass it to partial()")
    if to == "env":
        sweep_points = [
            {
                f"{env_prefix}{name.upper()}": v if isinstance(v, str) else json.dumps(v)
                for name, v in point.items()
            }
            for point in sweep_points
        ]
    return [{to: dict(point), **fixed} for point in sweep_points]


def metric_of(config: Mapping[str, Any]) -> Metric:
    """The configuration's ``metric`` block (``name``, ``goal``, default ``maximize``).

    :param config: the sweep configuration.
    :raises SweepError: when it has no usable ``metric``.
    """
    metric = config.get("metric")
    if not isinstance(metric, Mapping) or not isinstance(metric.get("name"), str):
        raise SweepError("metric: needs a mapping with a 'name' to choose the best run")
    goal = metric.get("goal", "maximize")
    if goal not in _GOALS:
        raise SweepError(f"metric.goal: must be 'maximize' or 'minimize', got {goal!r}")
    return Metric(metric["name"], goal)


def best(summaries: Sequence[Mapping[str, Any] | None], metric: Metric) -> int | None:
    """The index of the best summary by ``metric``, or ``None`` when none has a number for it.

    A run whose summary is missing, lacks the metric or holds no finite number is passed over
    (W&B offline, a failed summary read): it can never win. Ties go to the lowest index.

    :param summaries: one W&B summary per map index (``None`` for a missing one).
    :param metric: what to compare, and whether more is better.
    """
    if metric.goal not in _GOALS:
        raise SweepError(f"metric.goal: must be 'maximize' or 'minimize', got {metric.goal!r}")
    sign = 1 if metric.goal == "maximize" else -1
    chosen, chosen_score = None, -math.inf
    for index, summary in enumerate(summaries):
        value = finite_number((summary or {}).get(metric.name), float)
        if value is not None and sign * value > chosen_score:
            chosen, chosen_score = index, sign * value
    return chosen


@dataclass(frozen=True)
class _Param:
    name: str
    distribution: str
    spec: Mapping[str, Any]


def _parameter(name: str, spec: Any) -> _Param:
    where = f"parameters.{name}"
    if not isinstance(spec, Mapping):
        raise SweepError(f"{where}: must be a mapping such as {{values: [...]}}, got {spec!r}")
    if "parameters" in spec:
        raise SweepError(f"{where}.parameters: nested parameters are not supported; flatten them")
    unknown = sorted(set(spec) - _PARAM_KEYS)
    if unknown:
        raise SweepError(f"{where}: unknown key(s) {', '.join(map(repr, unknown))}")
    distribution = spec.get("distribution") or _default_distribution(where, spec)
    if distribution not in DISTRIBUTIONS:
        raise SweepError(
            f"{where}.distribution: {distribution!r} is not supported; use one of "
            + ", ".join(DISTRIBUTIONS)
        )
    if distribution == "constant":
        _need(where, spec, "value")
    elif distribution == "categorical":
        values = _need(where, spec, "values")
        if not isinstance(values, Sequence) or isinstance(values, str) or not values:
            raise SweepError(f"{where}.values: must be a non-empty list, got {values!r}")
        _check_probabilities(where, spec, len(values))
    elif distribution in ("normal", "q_normal", "log_normal", "q_log_normal"):
        _number(where, spec, "mu", default=0)
        if _number(where, spec, "sigma", default=1) <= 0:
            raise SweepError(f"{where}.sigma: must be positive")
    else:
        low, high = _number(where, spec, "min"), _number(where, spec, "max")
        if low > high:
            raise SweepError(f"{where}: min ({low}) is greater than max ({high})")
        if distribution == "int_uniform" and not all(_is_int(spec[k]) for k in ("min", "max")):
            raise SweepError(f"{where}: int_uniform needs integer min and max")
        if distribution in ("log_uniform_values", "q_log_uniform_values") and low <= 0:
            raise SweepError(f"{where}.min: {distribution} needs min > 0, got {low}")
    if distribution.startswith("q_") and _number(where, spec, "q", default=1) <= 0:
        raise SweepError(f"{where}.q: must be positive")
    return _Param(name, distribution, spec)


def _default_distribution(where: str, spec: Mapping[str, Any]) -> str:
    """W&B's inference when ``distribution`` is not given."""
    if "value" in spec:
        return "constant"
    if "values" in spec:
        return "categorical"
    if "min" in spec or "max" in spec:
        ints = all(_is_int(spec.get(k)) for k in ("min", "max"))
        return "int_uniform" if ints else "uniform"
    if "mu" in spec or "sigma" in spec:
        return "normal"
    raise SweepError(f"{where}: needs value, values, min/max or mu/sigma")


def _is_int(value: Any) -> bool:
    """An integer, and not a bool (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _need(where: str, spec: Mapping[str, Any], key: str) -> Any:
    if key not in spec:
        raise SweepError(f"{where}.{key}: required for distribution {spec.get('distribution')!r}")
    return spec[key]


def _number(where: str, spec: Mapping[str, Any], key: str, default: float | None = None) -> float:
    if key not in spec and default is not None:
        return default
    value = _need(where, spec, key)
    if finite_number(value, float) is None:
        raise SweepError(f"{where}.{key}: must be a finite number, got {value!r}")
    return value


def _check_probabilities(where: str, spec: Mapping[str, Any], count: int) -> None:
    probabilities = spec.get("probabilities")
    if probabilities is None:
        return
    if (
        not isinstance(probabilities, Sequence)
        or len(probabilities) != count
        or any(
            isinstance(p, bool) or not isinstance(p, int | float) or p < 0 for p in probabilities
        )
        or not math.isclose(sum(probabilities), 1.0, abs_tol=1e-6)
    ):
        raise SweepError(f"{where}.probabilities: needs {count} non-negative numbers summing to 1")


def _grid(specs: Mapping[str, _Param], run_cap: int | None) -> list[dict[str, Any]]:
    axes = []
    for name, param in specs.items():
        if param.distribution in CONTINUOUS:
            raise SweepError(
                f"parameters.{name}.distribution: a grid cannot enumerate "
                f"{param.distribution!r}; give values, value or an int_uniform range, "
                "or use method: random"
            )
        if param.distribution == "constant":
            axes.append([param.spec["value"]])
        elif param.distribution == "categorical":
            axes.append(list(param.spec["values"]))
        else:
            axes.append(list(range(param.spec["min"], param.spec["max"] + 1)))
    names = list(specs)
    combos: Iterator[tuple[Any, ...]] = itertools.product(*axes)
    if run_cap is not None:
        combos = itertools.islice(combos, run_cap)
    return [dict(zip(names, combo, strict=True)) for combo in combos]


def _draw(param: _Param, rng: random.Random) -> Any:
    spec, distribution = param.spec, param.distribution
    if distribution == "constant":
        return spec["value"]
    if distribution == "categorical":
        values = list(spec["values"])
        weights = spec.get("probabilities")
        return rng.choices(values, weights=weights)[0] if weights else rng.choice(values)
    if distribution == "int_uniform":
        return rng.randint(spec["min"], spec["max"])
    if distribution in ("normal", "q_normal", "log_normal", "q_log_normal"):
        x = rng.gauss(spec.get("mu", 0), spec.get("sigma", 1))
        if "log" in distribution:
            x = math.exp(x)
    elif distribution == "log_uniform":
        x = math.exp(rng.uniform(spec["min"], spec["max"]))
    elif distribution in ("log_uniform_values", "q_log_uniform_values"):
        x = math.exp(rng.uniform(math.log(spec["min"]), math.log(spec["max"])))
    else:  # uniform, q_uniform
        x = rng.uniform(spec["min"], spec["max"])
    if distribution.startswith("q_"):
        return _quantise(x, spec.get("q", 1))
    return x


def _quantise(x: float, q: float) -> float | int:
    """``round(x / q) * q``, as W&B does; an int for an integer ``q`` (the step is whole)."""
    if isinstance(q, int):
        return int(round(x / q) * q)
    # Rounded to 12 digits so 0.1 * 3 reads 0.3, not 0.30000000000000004, in env and config.
    return round(round(x / q) * q, 12)

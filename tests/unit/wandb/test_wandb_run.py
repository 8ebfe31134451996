"""Unit tests for the pure W&B run identity (wandb/wandb_run.py): run id, spec, sweeps.

Where the contract is "the wandb SDK will read this env as X", the test feeds the env to the
installed SDK's own ``Settings.update_from_env_vars`` rather than restating the SDK's rules.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from airflow_volcano_wandb.wandb.wandb_env import (
    airflow_config_from_env,
    container_env,
)
from airflow_volcano_wandb.wandb.wandb_run import (
    AirflowRunContext,
    WandbRunSpec,
    default_run_group,
    deterministic_run_id,
)
from test_support.wandb_specs import CTX, as_dict, make_spec, resolve, sdk_settings

# -- run id ---------------------------------------------------------------------------------


def test_deterministic_run_id_is_stable_and_wandb_valid() -> None:
    first = deterministic_run_id("dag", "task", "run", -1)
    assert first == deterministic_run_id("dag", "task", "run")
    assert re.fullmatch(r"[0-9a-z]{16}", first)
    assert sdk_settings({"WANDB_RUN_ID": first}).run_id == first


def test_deterministic_run_id_depends_on_every_part_of_the_task_instance_key() -> None:
    base = deterministic_run_id("dag", "task", "run", -1)
    variants = {
        deterministic_run_id("dag2", "task", "run", -1),
        deterministic_run_id("dag", "task2", "run", -1),
        deterministic_run_id("dag", "task", "run2", -1),
        deterministic_run_id("dag", "task", "run", 0),
        # Boundaries between parts matter: no ambiguity from concatenation.
        deterministic_run_id("da", "gtask", "run", -1),
    }
    assert base not in variants and len(variants) == 5


@given(
    dag_id=st.text(min_size=1, max_size=50),
    task_id=st.text(min_size=1, max_size=50),
    run_id=st.text(min_size=1, max_size=80),
    map_index=st.integers(min_value=-1, max_value=10_000),
)
def test_deterministic_run_id_shape_for_any_input(
    dag_id: str, task_id: str, run_id: str, map_index: int
) -> None:
    rid = deterministic_run_id(dag_id, task_id, run_id, map_index)
    assert re.fullmatch(r"[0-9a-z]{16}", rid)
    WandbRunSpec(run_id=rid)  # passes the spec's (= the SDK's) run id rules


def test_spec_is_the_same_for_every_try_of_a_task_instance() -> None:
    later_try = AirflowRunContext(**{**CTX.__dict__, "try_number": 3})
    assert make_spec().run_id == WandbRunSpec.for_task_instance(later_try).run_id
    assert make_spec(run_id="explicit-id").run_id == "explicit-id"


def test_spec_defaults_from_the_task_instance() -> None:
    spec = make_spec()
    assert spec.group == "retrain/manual__2026-01-02T03:04:05+00:00"
    assert spec.job_type == "train"
    assert spec.run_name == "retrain.train manual__2026-01-02T03:04:05+00:00"
    assert spec.tags == ("airflow", "dag:retrain")
    assert spec.rank_mode == "master"
    mapped = WandbRunSpec.for_task_instance(AirflowRunContext(**{**CTX.__dict__, "map_index": 3}))
    assert mapped.run_name == "retrain.train[3] manual__2026-01-02T03:04:05+00:00"
    assert mapped.run_id != make_spec().run_id


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"run_id": "a/b"}, "run id"),
        ({"run_id": " padded"}, "run id"),
        ({"project": "a:b"}, "project"),
        ({"tags": ("ok", "has,comma")}, "tag"),
        ({"tags": ("x" * 65,)}, "tag"),
        ({"mode": "shared"}, "rank_mode='shared'"),
        ({"mode": "dryrun"}, "mode"),
        ({"rank_mode": "all"}, "wandb_rank_mode"),
        ({"rank_mode": "shared", "mode": "offline"}, "needs W&B online"),
        ({"api_key_secret": ("", "k")}, "api_key_secret"),
        ({"base_url": "wandb.example.com"}, "base URL"),
        ({"extra_env": {"WANDB_API_KEY": "literal"}}, "api_key_secret"),
        ({"resume": "never"}, "resume must be 'allow' or 'must'"),
    ],
)
def test_spec_rejects_values_the_pods_would_fail_on(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        make_spec(**overrides)


# -- sweeps ---------------------------------------------------------------------------------


def test_a_sweeps_map_indexes_share_the_group_and_sweep_but_not_the_run() -> None:
    """One run per map index, one group and one W&B sweep for all of them, as the SDK reads it."""
    envs = []
    for map_index in range(3):
        ctx = AirflowRunContext(**{**CTX.__dict__, "map_index": map_index})
        spec = WandbRunSpec.for_task_instance(
            ctx, entity="team", project="mlp", group="sweep-lr", sweep_id="swp7x2k", mode="offline"
        )
        envs.append(resolve(container_env(spec, is_master_task=True)))
    settings = [sdk_settings(env) for env in envs]
    assert len({s.run_id for s in settings}) == 3
    assert {s.run_group for s in settings} == {"sweep-lr"}
    assert {s.sweep_id for s in settings} == {"swp7x2k"}
    assert [airflow_config_from_env(env)["map_index"] for env in envs] == [0, 1, 2]
    # A silent rank knows its sweep too, but never gets a run id of its own.
    other = as_dict(container_env(spec, is_master_task=False))
    assert other["WANDB_SWEEP_ID"] == "swp7x2k" and "WANDB_RUN_ID" not in other


def test_without_a_sweep_id_no_sweep_env_and_the_dag_run_is_the_group() -> None:
    env = as_dict(container_env(make_spec(), is_master_task=True))
    assert "WANDB_SWEEP_ID" not in env
    assert env["WANDB_RUN_GROUP"] == default_run_group(CTX.dag_id, CTX.dag_run_id)


@pytest.mark.parametrize("sweep_id", ["", " abc", "abc ", "a/b", "a%2F", "a?b"])
def test_a_bad_sweep_id_fails_before_anything_is_submitted(sweep_id: str) -> None:
    with pytest.raises(ValueError, match="invalid W&B sweep id"):
        make_spec(sweep_id=sweep_id)

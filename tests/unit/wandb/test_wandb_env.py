"""The container env of a W&B run (wandb/wandb_env.py): what every container gets, each rank
mode as the installed SDK reads it, and the Airflow context read back from it.

Where the contract is "the wandb SDK will read this env as X", the test feeds the env to the
installed SDK's own ``Settings.update_from_env_vars`` rather than restating the SDK's rules.
"""

from __future__ import annotations

import pytest

from airflow_volcano_wandb.wandb.wandb_env import (
    airflow_config_from_env,
    container_env,
    macro_values,
)
from airflow_volcano_wandb.wandb.wandb_run import (
    AirflowRunContext,
    WandbRunSpec,
)
from test_support.wandb_specs import (
    API_KEY,
    CTX,
    POD_NAME,
    SECRET,
    as_dict,
    make_spec,
    resolve,
    sdk_settings,
)

# -- container env: shared part ---------------------------------------------------------------


@pytest.mark.parametrize("is_master_task", [True, False])
def test_a_resumed_run_tells_every_container_it_must_resume(is_master_task: bool) -> None:
    env = as_dict(container_env(make_spec(resume="must"), is_master_task=is_master_task))
    assert env["WANDB_RESUME"] == "must"


@pytest.mark.parametrize("rank_mode", ["master", "shared"])
@pytest.mark.parametrize("is_master_task", [True, False])
def test_every_container_gets_the_common_env(rank_mode: str, is_master_task: bool) -> None:
    spec = make_spec(rank_mode=rank_mode, mode=None)
    env = as_dict(container_env(spec, is_master_task=is_master_task))
    assert env["WANDB_PROJECT"] == "mlp"
    assert env["WANDB_ENTITY"] == "team"
    assert env["WANDB_RUN_GROUP"] == spec.group
    assert env["WANDB_JOB_TYPE"] == "train"
    assert env["WANDB_TAGS"] == "airflow,dag:retrain"
    assert env["WANDB_RESUME"] == "allow"
    assert env["AIRFLOW_CTX_DAG_ID"] == "retrain"
    assert env["AIRFLOW_CTX_DAG_RUN_ID"] == CTX.dag_run_id
    assert env["AIRFLOW_CTX_TASK_ID"] == "train"
    assert env["AIRFLOW_CTX_TRY_NUMBER"] == "2"
    assert env["AIRFLOW_CTX_LOGICAL_DATE"] == CTX.logical_date
    assert env["AVW_AIRFLOW_TASK_URL"] == CTX.task_url
    assert env["AVW_WANDB_RANK_MODE"] == rank_mode
    assert env["WANDB_API_KEY"] == {"secretKeyRef": {"name": SECRET.name, "key": SECRET.key}}
    assert "WANDB_BASE_URL" not in env
    assert all(
        isinstance(e.get("value", ""), str) for e in container_env(spec, is_master_task=True)
    )


def test_api_key_is_only_ever_a_secret_reference() -> None:
    for rank_mode, mode in [("master", "offline"), ("shared", None), ("master", "disabled")]:
        spec = make_spec(rank_mode=rank_mode, mode=mode)
        for is_master in (True, False):
            env = container_env(spec, is_master_task=is_master)
            (key_entry,) = [e for e in env if e["name"] == "WANDB_API_KEY"]
            assert "value" not in key_entry
            assert set(key_entry["valueFrom"]) == {"secretKeyRef"}
    no_secret = container_env(make_spec(api_key_secret=None), is_master_task=True)
    assert "WANDB_API_KEY" not in as_dict(no_secret)


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        (None, None),
        ("https://api.wandb.ai", None),
        ("https://api.wandb.ai/", None),
        ("https://api.forge.coreweave.com", None),
        ("https://wandb.example.com/", "https://wandb.example.com"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
    ],
)
def test_base_url_only_when_not_the_default(base_url: str | None, expected: str | None) -> None:
    env = as_dict(container_env(make_spec(base_url=base_url), is_master_task=True))
    assert env.get("WANDB_BASE_URL") == expected


def test_optional_fields_are_omitted_not_blank() -> None:
    ctx = AirflowRunContext(dag_id="d", dag_run_id="r", task_id="t", try_number=1)
    spec = WandbRunSpec.for_task_instance(ctx, tags=())
    env = as_dict(container_env(spec, is_master_task=True))
    for name in (
        "WANDB_ENTITY",
        "WANDB_PROJECT",
        "WANDB_TAGS",
        "WANDB_MODE",
        "WANDB_API_KEY",
        "AIRFLOW_CTX_LOGICAL_DATE",
        "AVW_AIRFLOW_TASK_URL",
        "AIRFLOW_CTX_MAP_INDEX",
    ):
        assert name not in env, name
    assert all(value != "" for value in env.values())


def test_extra_env_is_added_but_cannot_override_the_contract() -> None:
    spec = make_spec(extra_env={"MY_FLAG": "1", "WANDB_RUN_ID": "hijack"})
    env = as_dict(container_env(spec, is_master_task=True))
    assert env["MY_FLAG"] == "1"
    assert env["WANDB_RUN_ID"] == spec.run_id


# -- container env: rank modes, as the SDK reads them ------------------------------------------


def test_master_mode_master_task_owns_the_run() -> None:
    spec = make_spec(rank_mode="master", mode="offline")
    environ = resolve(container_env(spec, is_master_task=True))
    settings = sdk_settings(environ)
    assert settings.run_id == spec.run_id
    assert settings.run_name == spec.run_name
    assert settings.mode == "offline"
    assert settings.resume == "allow"
    assert settings.project == "mlp" and settings.entity == "team"
    assert settings.run_group == spec.group
    assert settings.run_job_type == "train"
    assert tuple(settings.run_tags) == ("airflow", "dag:retrain")
    assert settings.api_key == API_KEY


def test_master_mode_other_tasks_cannot_start_runs() -> None:
    spec = make_spec(rank_mode="master", mode="online")
    environ = resolve(container_env(spec, is_master_task=False))
    assert "WANDB_RUN_ID" not in environ and "WANDB_NAME" not in environ
    settings = sdk_settings(environ)
    assert settings.mode == "disabled"
    assert settings._noop  # the SDK's "wandb.init() returns a dummy run" switch
    assert settings.run_group == spec.group


def test_master_mode_without_mode_leaves_the_sdk_default() -> None:
    env = as_dict(container_env(make_spec(mode=None), is_master_task=True))
    assert "WANDB_MODE" not in env


def test_shared_mode_every_rank_writes_to_one_run() -> None:
    spec = make_spec(rank_mode="shared", mode=None)
    primary = sdk_settings(resolve(container_env(spec, is_master_task=True)))
    worker = sdk_settings(resolve(container_env(spec, is_master_task=False)))
    for settings in (primary, worker):
        assert settings.mode == "shared" and settings._shared
        assert settings.run_id == spec.run_id
        assert settings.x_label == POD_NAME
    assert primary.x_primary is True and primary.x_update_finish_state is True
    assert worker.x_primary is False and worker.x_update_finish_state is False
    label = as_dict(container_env(spec, is_master_task=False))["WANDB_X_LABEL"]
    assert label == {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}


@pytest.mark.parametrize("rank_mode", ["master", "shared"])
def test_disabled_mode_disables_every_rank(rank_mode: str) -> None:
    spec = make_spec(rank_mode=rank_mode, mode="disabled")
    for is_master in (True, False):
        env = as_dict(container_env(spec, is_master_task=is_master))
        assert env["WANDB_MODE"] == "disabled"


# -- airflow context round trip ---------------------------------------------------------------


def test_airflow_config_from_env_reads_back_the_container_env() -> None:
    ctx = AirflowRunContext(**{**CTX.__dict__, "map_index": 4})
    spec = WandbRunSpec.for_task_instance(ctx)
    environ = resolve(container_env(spec, is_master_task=True))
    assert airflow_config_from_env(environ) == {
        "dag_id": "retrain",
        "run_id": CTX.dag_run_id,
        "task_id": "train",
        "try_number": 2,
        "map_index": 4,
        "logical_date": CTX.logical_date,
        "task_url": CTX.task_url,
    }
    assert airflow_config_from_env({}) == {}


def test_macro_values() -> None:
    spec = make_spec()
    assert macro_values(spec, author="alice") == {
        "run_id": spec.run_id,
        "run_name": spec.run_name,
        "entity_name": "team",
        "project_name": "mlp",
        "author": "alice",
    }
    bare = WandbRunSpec(run_id="abc")
    assert macro_values(bare) == {"run_id": "abc", "run_name": "abc"}

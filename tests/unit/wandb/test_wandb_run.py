"""Unit tests for the pure W&B run identity and env contract (wandb/wandb_run.py).

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
    macro_values,
)
from airflow_volcano_wandb.wandb.wandb_queue_ref import WandbQueueRef, is_queue_ref, parse_queue_ref
from airflow_volcano_wandb.wandb.wandb_run import (
    AirflowRunContext,
    SecretKeyRef,
    WandbRunSpec,
    default_run_group,
    deterministic_run_id,
)
from airflow_volcano_wandb.wandb.wandb_urls import app_url, run_url
from test_support.wandb_support import airflow_run_context

CTX = airflow_run_context()
SECRET = SecretKeyRef("wandb-job-abc-api-key", "api-key")
POD_NAME = "wandb-job-abc-worker-1"
API_KEY = "k" * 40


def make_spec(**overrides: object) -> WandbRunSpec:
    kwargs: dict[str, object] = {
        "entity": "team",
        "project": "mlp",
        "api_key_secret": SECRET,
        "mode": "offline",
    }
    kwargs.update(overrides)
    return WandbRunSpec.for_task_instance(CTX, **kwargs)  # type: ignore[arg-type]


def as_dict(env: list[dict]) -> dict[str, object]:
    names = [e["name"] for e in env]
    assert len(names) == len(set(names)), f"duplicate env names: {names}"
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in env}


def resolve(env: list[dict]) -> dict[str, str]:
    """What the kubelet would put in the container: Secret and Downward API values filled."""
    out = {}
    for entry in env:
        if "value" in entry:
            out[entry["name"]] = entry["value"]
        elif "secretKeyRef" in entry["valueFrom"]:
            out[entry["name"]] = API_KEY
        elif entry["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name":
            out[entry["name"]] = POD_NAME
        else:  # pragma: no cover - a new kind of valueFrom would need handling here
            raise AssertionError(entry)
    return out


def sdk_settings(environ: dict[str, str]):
    """The wandb SDK's settings after reading ``environ`` the way wandb.init does."""
    from wandb.sdk import wandb_settings  # a hard dependency: missing means failing

    settings = wandb_settings.Settings()
    settings.update_from_env_vars(environ)
    return settings


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


# -- URLs -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("base_url", "expected"),
    [
        (None, "https://wandb.ai/team/mlp/runs/abc123"),
        ("https://api.wandb.ai", "https://wandb.ai/team/mlp/runs/abc123"),
        ("https://api.wandb.ai/", "https://wandb.ai/team/mlp/runs/abc123"),
        ("https://wandb.example.com", "https://wandb.example.com/team/mlp/runs/abc123"),
        ("http://localhost:8080/", "http://localhost:8080/team/mlp/runs/abc123"),
        ("https://api.acme.example", "https://app.acme.example/team/mlp/runs/abc123"),
    ],
)
def test_run_url(base_url: str | None, expected: str) -> None:
    assert run_url(base_url, "team", "mlp", "abc123") == expected


def test_run_url_quotes_path_segments() -> None:
    assert (
        run_url(None, "team", "my project", "a#b")
        == "https://wandb.ai/team/my%20project/runs/a%23b"
    )


@pytest.mark.parametrize(
    "base_url",
    [
        # Not "https://api.wandb.ai": wandb>=0.26 links it to CoreWeave Forge's UI; we keep
        # https://wandb.ai, the cloud's long-standing address (test_run_url covers it).
        "https://api.forge.coreweave.com",
        "https://api.wandb.test",
        "https://api.acme.example",
        "https://wandb.example.com",
        "http://localhost:8080",
        "http://127.0.0.1:9999",
    ],
)
def test_app_url_matches_the_sdk(base_url: str) -> None:
    from wandb import util as wandb_util

    # The wandb of Airflow 3.0's time (0.21, in test-compat) calls it `app_url`.
    sdk_app_url = getattr(wandb_util, "api_to_app_url", None) or wandb_util.app_url
    if "forge.coreweave.com" in base_url:
        # Ours always links Forge's real UI. An SDK that does not know it yet (before 0.31)
        # sends Forge's API to the generic "app." host; one that knows it agrees with us.
        assert app_url(base_url) == "https://forge.coreweave.com/wandb"
        assert sdk_app_url(base_url).rstrip("/") in (
            "https://forge.coreweave.com/wandb",
            "https://app.forge.coreweave.com",
        )
        return
    assert app_url(base_url) == sdk_app_url(base_url).rstrip("/")


def test_spec_url() -> None:
    assert make_spec().url == f"https://wandb.ai/team/mlp/runs/{make_spec().run_id}"
    assert WandbRunSpec(run_id="abc").url is None


# -- queue references -------------------------------------------------------------------------


def test_parse_queue_ref() -> None:
    assert parse_queue_ref("wandb-queue://team/volcano-queue") == WandbQueueRef(
        "team", "volcano-queue"
    )
    assert parse_queue_ref("wandb-queue://team/my%20queue").queue == "my queue"
    assert is_queue_ref("wandb-queue://team/q") and is_queue_ref("WANDB-QUEUE://team/q")
    assert not is_queue_ref("seed/volcano.yaml") and not is_queue_ref({"kind": "Job"})


@pytest.mark.parametrize(
    "bad",
    [
        "wandb-queue://team",
        "wandb-queue://team/",
        "wandb-queue:///queue",
        "wandb-queue://team/a/b",
        "wandb-queue://team/q?x=1",
        "wandb-queue://team/q#frag",
        "wandb-queue:team/q",
        "https://team/q",
    ],
)
def test_parse_queue_ref_rejects_malformed(bad: str) -> None:
    with pytest.raises(ValueError):
        parse_queue_ref(bad)


@given(
    entity=st.text(min_size=1, max_size=30).filter(str.strip),
    queue=st.text(min_size=1, max_size=30).filter(str.strip),
)
def test_queue_ref_round_trips(entity: str, queue: str) -> None:
    ref = WandbQueueRef(entity, queue)
    assert parse_queue_ref(str(ref)) == ref


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

"""Unit tests for WandbHook's connection handling and queue-config unwrapping (no network)."""

from __future__ import annotations

import base64
import importlib.metadata
import json
import threading

import airflow
import pytest
import yaml
from packaging.version import Version

from airflow_volcano_wandb.hooks.wandb import (
    WANDB_CONN_FIELDS,
    WANDB_UI_FIELD_BEHAVIOUR,
    WandbHook,
)
from airflow_volcano_wandb.template.load import load_queue_config

KEY = "unit" + "x" * 40
JOB = {
    "apiVersion": "batch.volcano.sh/v1alpha1",
    "kind": "Job",
    "metadata": {"name": "j-${run_id}"},
}


def define(monkeypatch: pytest.MonkeyPatch, conn_id: str, **fields: object) -> str:
    monkeypatch.setenv(
        f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps({"conn_type": "wandb", **fields})
    )
    return conn_id


def test_hook_metadata() -> None:
    assert WandbHook.conn_name_attr == "wandb_conn_id"
    assert WandbHook.default_conn_name == "wandb_default"
    assert WandbHook.conn_type == "wandb"
    assert WandbHook.hook_name == "Weights & Biases"


def test_connection_values(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = define(
        monkeypatch,
        "wandb_unit_full",
        password=KEY,
        host="https://wandb.example.com/",
        extra={"entity": "team", "project": "mlp"},
    )
    hook = WandbHook(conn_id)
    assert hook.api_key == KEY
    assert hook.base_url == "https://wandb.example.com"
    assert (hook.entity, hook.project) == ("team", "mlp")
    assert hook.run_url("abc") == "https://wandb.example.com/team/mlp/runs/abc"


@pytest.mark.parametrize(
    ("host", "port", "expected"),
    [
        ("", None, None),
        ("https://api.wandb.ai", None, None),
        ("wandb.internal", None, "https://wandb.internal"),
        ("wandb.internal", 8443, "https://wandb.internal:8443"),
        ("http://127.0.0.1:8080", None, "http://127.0.0.1:8080"),
    ],
)
def test_base_url_forms(
    monkeypatch: pytest.MonkeyPatch, host: str, port: int | None, expected: str | None
) -> None:
    name = f"wandb_unit_host_{abs(hash((host, port)))}"
    hook = WandbHook(define(monkeypatch, name, host=host, port=port))
    assert hook.base_url == expected


def test_legacy_prefixed_extras(monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = define(
        monkeypatch,
        "wandb_unit_legacy",
        extra={"extra__wandb__entity": "team", "extra__wandb__project": " "},
    )
    hook = WandbHook(conn_id)
    assert hook.entity == "team"
    assert hook.project is None  # blank means unset


def test_missing_connection_means_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW_CONN_WANDB_UNIT_ABSENT", raising=False)
    hook = WandbHook("wandb_unit_absent")
    assert hook.connection is None
    assert (hook.api_key, hook.base_url, hook.entity, hook.project) == (None, None, None, None)
    no_conn = WandbHook(None)
    assert no_conn.connection is None and no_conn.api_key is None
    with pytest.raises(ValueError, match="entity and a project"):
        no_conn.run_url("abc")
    with pytest.raises(ValueError, match="needs a project"):
        no_conn.get_run_summary("abc")  # fails before any network call
    with pytest.raises(ValueError, match="needs an entity"):
        no_conn.get_queue_template(None, "q")


def test_api_key_is_registered_with_the_masker(monkeypatch: pytest.MonkeyPatch) -> None:
    from airflow_volcano_wandb.airflow_compat import redact

    secret = "masked" + "m" * 40
    hook = WandbHook(define(monkeypatch, "wandb_unit_mask", password=secret))
    assert hook.api_key == secret
    assert redact(f"key={secret}") == "key=***"
    encoded = base64.b64encode(secret.encode()).decode()  # as a Secret's data carries it
    assert redact(f'"data": {{"api-key": "{encoded}"}}') == '"data": {"api-key": "***"}'
    basic = base64.b64encode(f"api:{secret}".encode()).decode()  # as the W&B client sends it
    assert redact(f"Authorization: Basic {basic}") == "Authorization: Basic ***"


def test_mask_api_key_registers_the_key_quietly(monkeypatch, caplog) -> None:
    """For a resumed task or a sensor: mask without using the key, no warning without one."""
    from airflow_volcano_wandb.airflow_compat import redact

    secret = "quiet" + "q" * 40
    hook = WandbHook(define(monkeypatch, "wandb_unit_quiet", password=secret))
    assert hook.mask_api_key() == secret
    assert redact(f"WANDB_API_KEY={secret}") == "WANDB_API_KEY=***"
    encoded = base64.b64encode(secret.encode()).decode()
    assert redact(encoded) == "***"
    assert redact(base64.b64encode(f"api:{secret}".encode()).decode()) == "***"
    assert hook.api_key == secret
    monkeypatch.setattr(hook, "get_connection", lambda conn_id: pytest.fail("read again"))
    assert hook.mask_api_key() == secret  # the loaded connection, masked when it was read
    assert WandbHook("wandb_not_defined").mask_api_key() is None
    assert WandbHook(None).mask_api_key() is None
    assert "not defined" not in caplog.text


def test_ui_field_behaviour() -> None:
    behaviour = WandbHook.get_ui_field_behaviour()
    assert set(behaviour["hidden_fields"]) == {"schema", "port", "login"}
    assert behaviour["relabeling"] == {"password": "API Key", "host": "Base URL"}
    assert set(WANDB_CONN_FIELDS) == {"entity", "project"}
    assert WANDB_UI_FIELD_BEHAVIOUR["relabeling"] == behaviour["relabeling"]


def test_connection_form_as_the_airflow_ui_builds_it(monkeypatch) -> None:
    # The API server builds the connection form without Flask/WTForms by mocking them; this is
    # that code path, so it checks what the UI shows for a "wandb" connection.
    from airflow.api_fastapi.core_api.services.ui import connections
    from airflow.providers_manager import ProvidersManager

    # Airflow 3.0/3.1 keep one ProvidersManager per process (a Singleton metaclass): one that
    # other tests initialised without the mocks has no widgets. The form gets a new one here.
    instances = getattr(type(ProvidersManager), "_instances", None)
    if instances is not None:
        monkeypatch.delitem(instances, ProvidersManager, raising=False)

    hooks, widgets, behaviours = connections.HookMetaService._get_hooks_with_mocked_fab()
    assert "wandb" in hooks, "provider not installed as a package (no entry point)"
    assert hooks["wandb"].hook_name == "Weights & Biases"
    fields = {"extra__wandb__entity", "extra__wandb__project"}
    # Airflow >= 3.2 reads the form from the provider info, 3.1 from the hook's WTForms
    # widgets with Flask-AppBuilder mocked; 3.0 needs Flask-AppBuilder installed for those
    # widgets, and without it drops the hook's whole form: no extra fields, no labels (the
    # extras then go in the Extra JSON).
    if Version(airflow.__version__) >= Version("3.1") or _installed("flask-appbuilder"):
        assert fields <= set(widgets)
        assert behaviours["wandb"]["relabeling"] == {"password": "API Key", "host": "Base URL"}
        assert "login" in behaviours["wandb"]["hidden_fields"]
    else:
        assert not fields & set(widgets)
        assert "wandb" not in behaviours


def _installed(distribution: str) -> bool:
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# -- queue config unwrapping ------------------------------------------------------------------


@pytest.mark.parametrize(
    "stored",
    [
        json.dumps({"resource_args": {"kubernetes": JOB}}),  # what create_run_queue stores
        {"resource_args": {"kubernetes": JOB}},
        yaml.safe_dump({"resource_args": {"kubernetes": JOB}}),
        JOB,  # a bare job spec
        json.dumps(JOB).encode(),
    ],
)
def test_load_queue_config(stored: object) -> None:
    spec = load_queue_config(stored, "kubernetes", "team/q")
    assert spec == JOB
    spec["kind"] = "mutated"
    assert JOB["kind"] == "Job"  # a copy, never the caller's object


@pytest.mark.parametrize(
    ("stored", "resource", "message"),
    [
        ({}, "kubernetes", "no resource config"),
        ("", None, "no resource config"),
        ("- a\n- b\n", "kubernetes", "team/q: the template is a list"),
        ({"resource_args": {"kubernetes": {}}}, "kubernetes", "team/q: the template must be"),
        ({"resource_args": {"sagemaker": {}}}, "kubernetes", "no resource_args.kubernetes"),
        (JOB, "sagemaker", "sagemaker"),
    ],
)
def test_load_queue_config_errors(stored: object, resource: str | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_queue_config(stored, resource, "team/q")


def test_a_hook_whose_wandb_api_never_answers_blocks_no_other_hook(monkeypatch):
    """A read abandoned by its deadline may leave a thread inside ``wandb.Api()`` for good;
    another hook of the process (the triggerer's next read) must still get its client.
    ``functools.cached_property`` on Python 3.11 held one lock for every hook meanwhile."""
    entered, release = threading.Event(), threading.Event()

    def get_conn(self):
        if self.wandb_conn_id == "never_answers":
            entered.set()
            release.wait(30)
        return self.wandb_conn_id

    monkeypatch.setattr(WandbHook, "get_conn", get_conn)
    threading.Thread(target=lambda: WandbHook("never_answers").api, daemon=True).start()
    assert entered.wait(10)
    answered: list[str] = []
    other = threading.Thread(target=lambda: answered.append(WandbHook("other").api), daemon=True)
    other.start()
    other.join(10)
    release.set()
    assert answered == ["other"]

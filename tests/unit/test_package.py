"""The package as Airflow sees it: provider info, public names, and DAGs that import cleanly."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from test_support.airflow_compat import dag_bag, serialize_dag

REPO = Path(__file__).resolve().parents[2]


def test_provider_info_is_found_through_the_entry_point():
    from importlib.metadata import entry_points

    (entry,) = [
        e
        for e in entry_points(group="apache_airflow_provider")
        if e.value.startswith("airflow_volcano_wandb")
    ]
    info = entry.load()()
    assert info["package-name"] == "airflow-volcano-wandb"
    (conn_type,) = info["connection-types"]
    assert conn_type["hook-class-name"] == "airflow_volcano_wandb.hooks.wandb.WandbHook"
    assert conn_type["connection-type"] == "wandb"
    assert conn_type["conn-fields"] and conn_type["ui-field-behaviour"]
    assert info["extra-links"] == ["airflow_volcano_wandb.links.wandb.WandbRunLink"]


def test_every_module_the_provider_info_names_imports():
    from airflow_volcano_wandb import get_provider_info

    info = get_provider_info()
    for section in ("operators", "sensors", "hooks", "triggers"):
        for group in info[section]:
            for module in group["python-modules"]:
                importlib.import_module(module)
    for dotted in [c["hook-class-name"] for c in info["connection-types"]] + info["extra-links"]:
        module, _, name = dotted.rpartition(".")
        assert getattr(importlib.import_module(module), name)


def test_the_provider_registers_its_airflow_plugin_and_no_pytest_plugin():
    """Installing the provider must load nothing into its users' pytest runs: the local
    cluster's fixture comes with its own distribution, pytest-volcano-cluster. Its one
    Airflow plugin (the Training tab, docs/training-tab.md) is registered by the entry point
    alone: get_provider_info's ``plugins`` as well would load it twice."""
    from importlib.metadata import distribution

    points = {(e.group, e.value) for e in distribution("airflow-volcano-wandb").entry_points}
    assert {group for group, _ in points} == {"apache_airflow_provider", "airflow.plugins"}
    assert ("airflow.plugins", "airflow_volcano_wandb.ui.plugin:TrainingPlugin") in points


def test_the_cluster_distribution_registers_the_volcano_cluster_fixture():
    from importlib.metadata import entry_points

    plugins = [
        (e.dist.name, e.value)
        for e in entry_points(group="pytest11")
        if e.name == "volcano_cluster"
    ]
    assert plugins == [("pytest-volcano-cluster", "airflow_volcano_wandb.testing.pytest_plugin")]


def test_the_testing_extra_is_the_cluster_distribution_of_the_same_release():
    """The cluster fills in the provider's package and builds its versions.py: one release."""
    from importlib.metadata import requires, version

    release = version("airflow-volcano-wandb")
    assert version("pytest-volcano-cluster") == release
    assert f'pytest-volcano-cluster=={release}; extra == "testing"' in requires(
        "airflow-volcano-wandb"
    )
    assert f"airflow-volcano-wandb=={release}" in requires("pytest-volcano-cluster")


def test_public_names_are_stable():
    from airflow_volcano_wandb.hooks import VolcanoHook, WandbHook
    from airflow_volcano_wandb.links import WandbRunLink
    from airflow_volcano_wandb.operators import VolcanoPyTorchJobOperator
    from airflow_volcano_wandb.sensors import VolcanoJobSensor
    from airflow_volcano_wandb.template import TemplateError, render_job
    from airflow_volcano_wandb.triggers import VolcanoJobTrigger

    assert issubclass(TemplateError, ValueError)
    assert all(
        [
            VolcanoHook,
            WandbHook,
            WandbRunLink,
            VolcanoPyTorchJobOperator,
            VolcanoJobSensor,
            VolcanoJobTrigger,
            render_job,
        ]
    )


def test_the_provider_manager_registers_the_wandb_connection_type():
    from airflow.providers_manager import ProvidersManager

    hooks = ProvidersManager().hooks
    assert hooks["wandb"].hook_class_name == "airflow_volcano_wandb.hooks.wandb.WandbHook"


@pytest.mark.parametrize("folder", ["dags", "tests/dags"])
def test_dags_import_and_serialize_without_errors(folder):
    bag = dag_bag(str(REPO / folder))
    assert bag.import_errors == {}
    assert bag.dags
    for dag in bag.dags.values():  # as the scheduler stores it: catches e.g. a templated
        assert serialize_dag(dag)["dag"]["dag_id"] == dag.dag_id  # BaseOperator field
    if folder == "dags":
        assert {
            "volcano_pytorch_manual",
            "volcano_pytorch_retraining",
            "volcano_pytorch_promote",
        } <= set(bag.dags)


def test_manual_dag_params_make_a_usable_trigger_form():
    dag = dag_bag(str(REPO / "dags")).dags["volcano_pytorch_manual"]
    replicas = dag.params.get_param("worker_replicas")
    assert replicas.value == 1
    assert replicas.schema["minimum"] == 0 and replicas.schema["maximum"] == 64
    assert replicas.schema["title"] and replicas.description
    for name in ("image_uri", "epochs", "gpus_per_worker", "wandb_entity", "wandb_project"):
        assert dag.params.get_param(name).schema["title"], name
    with pytest.raises(Exception, match=r"1000|maximum"):
        dag.params.get_param("worker_replicas").resolve(1000)


def test_manual_dag_allow_lists_come_from_the_deployments_config(monkeypatch):
    """Not from the form, nor from a Variable a UI user may edit: the Airflow configuration."""
    from test_support.airflow_compat import param_validation_error
    from test_support.jobs import load_dag

    ParamValidationError = param_validation_error()

    path = REPO / "dags" / "volcano_pytorch_manual.py"
    dag = load_dag(path, "volcano_pytorch_manual")
    namespace, submit = dag.params.get_param("namespace"), dag.get_task("submit")
    assert (namespace.value, namespace.schema["enum"]) == ("wandb", ["wandb"])
    assert submit.allowed_namespaces == ["wandb"]
    assert submit.allowed_images == ["ghcr.io/example/*"]
    with pytest.raises(ParamValidationError, match="'kube-system' is not one of"):
        namespace.resolve("kube-system")

    image = dag.params.get_param("image_uri")
    assert (
        image.resolve("ghcr.io/example/volcano-ddp-mlp:v2") == "ghcr.io/example/volcano-ddp-mlp:v2"
    )
    with pytest.raises(ParamValidationError, match="does not match"):
        image.resolve("evil.example/miner:latest")  # refused by the form, before any run

    monkeypatch.setenv("AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_NAMESPACES", "team-a, team-b")
    monkeypatch.setenv("AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_IMAGES", "registry.example/ml/*")
    with pytest.raises(ValueError, match=r"default_image .* matches none of allowed_images"):
        load_dag(path, "volcano_pytorch_manual")
    monkeypatch.setenv("AIRFLOW__VOLCANO_PYTORCH_MANUAL__DEFAULT_IMAGE", "registry.example/ml/a:1")
    dag = load_dag(path, "volcano_pytorch_manual")
    assert dag.params.get_param("image_uri").value == "registry.example/ml/a:1"
    namespace, submit = dag.params.get_param("namespace"), dag.get_task("submit")
    assert (namespace.value, namespace.schema["enum"]) == ("team-a", ["team-a", "team-b"])
    assert submit.allowed_namespaces == ["team-a", "team-b"]
    assert submit.allowed_images == ["registry.example/ml/*"]
    assert namespace.resolve("team-b") == "team-b"
    with pytest.raises(ParamValidationError):
        namespace.resolve("wandb")

    exact = "registry.example/ml/a:1, registry.example/ml/b:2"
    monkeypatch.setenv("AIRFLOW__VOLCANO_PYTORCH_MANUAL__ALLOWED_IMAGES", exact)
    image = load_dag(path, "volcano_pytorch_manual").params.get_param("image_uri")
    assert image.schema["enum"] == ["registry.example/ml/a:1", "registry.example/ml/b:2"]


def test_airflow_env_is_isolated():
    assert os.environ["AIRFLOW_HOME"] != str(Path.home() / "airflow")


def test_the_trigger_module_imports_no_kubernetes_client():
    """The triggerer imports a trigger's module inside its event loop: it must be cheap.

    The Kubernetes clients (seconds to import on a busy machine) are loaded in a thread when
    the first trigger runs, so other triggers in the triggerer do not stall meanwhile.
    """
    import subprocess
    import sys

    probe = (
        "import sys, airflow.triggers.base\n"
        "import airflow_volcano_wandb.triggers.volcano\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('kubernetes', 'kubernetes_asyncio', 'aiohttp', 'wandb')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]", out.stdout[:2000]


def test_the_pytest_plugin_loads_nothing_heavy_into_users_test_runs():
    import subprocess
    import sys

    code = (
        "import sys, airflow_volcano_wandb.testing.pytest_plugin; "
        "print(sorted(m for m in sys.modules if m.startswith(('airflow_volcano_wandb.testing"
        ".cluster', 'cryptography', 'kubernetes', 'airflow.'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout

"""Checks run by scripts/check-wheel.sh inside the venv the wheels were installed into.

Run from a temporary directory (``python -`` with this file on stdin), so the checkout is not
on ``sys.path`` and everything below comes from the installed wheels: ``provider`` with the
provider's wheel alone, then ``cluster`` once the local cluster's wheel is added.

usage: python - provider DAGS_FOLDER < scripts/check_installed.py
       python - cluster < scripts/check_installed.py
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import sysconfig
from importlib import resources
from importlib.metadata import entry_points
from pathlib import Path

EXAMPLE_DAGS = {
    "volcano_pytorch_manual",
    "volcano_pytorch_retraining",
    "volcano_pytorch_promote",
    "volcano_pytorch_sweep",
}
# What the local cluster needs at run time besides Python: the Go modules it builds from and
# KWOK's stage definitions (package data, easy to lose from a wheel).
PACKAGE_DATA = (
    "go/controlplane/go.mod",
    "go/controlplane/go.sum",
    "go/volcano/go.mod",
    "go/volcano/go.sum",
    "go/kwok/go.mod",
    "go/kwok/go.sum",
    "stages/nodes.yaml",
    "stages/pods.yaml",
)


def check(condition: bool, what: str) -> None:
    if not condition:
        sys.exit(f"check-wheel: FAILED: {what}")
    print(f"check-wheel: ok: {what}")


def from_site(module: str) -> bool:
    """Whether ``module`` is imported from the venv's site-packages (a wheel), not a checkout."""
    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    path = Path(importlib.import_module(module).__file__).resolve()
    return path.is_relative_to(site)


def check_provider(dags_folder: Path) -> None:
    import airflow_volcano_wandb

    check(from_site("airflow_volcano_wandb"), "the package is imported from the wheel")
    check(
        importlib.util.find_spec("airflow_volcano_wandb.testing") is None,
        "the provider alone has no airflow_volcano_wandb.testing",
    )
    # Other plugins come with the provider's dependencies (anyio's): none of this project's.
    plugins = [
        e.value
        for e in entry_points(group="pytest11")
        if e.dist.name == "airflow-volcano-wandb" or e.value.startswith("airflow_volcano_wandb")
    ]
    check(not plugins, f"the provider alone registers no pytest plugin {plugins}")

    (entry,) = [
        e
        for e in entry_points(group="apache_airflow_provider")
        if e.name == "provider_info" and e.value.startswith("airflow_volcano_wandb")
    ]
    info = entry.load()()
    check(info["package-name"] == "airflow-volcano-wandb", "the provider entry point loads")
    check(info["versions"] == [airflow_volcano_wandb.__version__], "provider info has the version")
    modules = [
        m
        for s in ("operators", "sensors", "hooks", "triggers")
        for g in info[s]
        for m in g["python-modules"]
    ]
    for module in modules:
        importlib.import_module(module)
    check(bool(modules), f"every module the provider info names imports ({len(modules)})")
    check(
        [c["connection-type"] for c in info["connection-types"]] == ["wandb"],
        "provider info declares the wandb connection type",
    )

    from airflow.providers_manager import ProvidersManager

    manager = ProvidersManager()
    check("airflow-volcano-wandb" in manager.providers, "ProvidersManager lists the provider")
    from airflow.sdk.providers_manager_runtime import ProvidersManagerTaskRuntime

    # Airflow 3.3 moved hook discovery to the task runtime (ProvidersManager.hooks is deprecated).
    hook = ProvidersManagerTaskRuntime().hooks["wandb"]
    check(
        hook is not None and hook.hook_class_name == "airflow_volcano_wandb.hooks.wandb.WandbHook",
        "ProvidersManager discovers the wandb connection type",
    )

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dags_folder))
    check(
        bag.import_errors == {},
        "the example DAGs parse" + (f": {bag.import_errors}" if bag.import_errors else ""),
    )
    check(set(bag.dag_ids) == EXAMPLE_DAGS, f"the example DAGs are found: {sorted(bag.dag_ids)}")


def check_cluster() -> None:
    check(
        from_site("airflow_volcano_wandb.testing.cluster"),
        "airflow_volcano_wandb.testing.cluster is imported from the cluster's wheel",
    )
    check(from_site("airflow_volcano_wandb"), "beside the provider's own package")
    cluster_pkg = resources.files("airflow_volcano_wandb.testing.cluster")
    missing = [p for p in PACKAGE_DATA if not cluster_pkg.joinpath(p).is_file()]
    check(
        not missing,
        "the cluster's wheel holds its Go modules and KWOK stages"
        + (f": missing {missing}" if missing else ""),
    )

    (plugin,) = [e for e in entry_points(group="pytest11") if e.name == "volcano_cluster"]
    check(
        plugin.dist.name == "pytest-volcano-cluster" and plugin.load().volcano_cluster is not None,
        "the cluster's wheel registers the volcano_cluster fixture",
    )


if __name__ == "__main__":
    if sys.argv[1] == "provider":
        check_provider(Path(sys.argv[2]))
    else:
        check_cluster()

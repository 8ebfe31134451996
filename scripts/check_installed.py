"""Checks run by scripts/check-wheel.sh inside the venv the wheel was installed into.

Run from a temporary directory (``python -`` with this file on stdin), so the checkout is not
on ``sys.path`` and everything below comes from the installed wheel.

usage: python - DAGS_FOLDER < scripts/check_installed.py
"""

from __future__ import annotations

import importlib
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


def main(dags_folder: Path) -> None:
    import airflow_volcano_wandb

    site = Path(sysconfig.get_paths()["purelib"]).resolve()
    installed = Path(airflow_volcano_wandb.__file__).resolve()
    check(installed.is_relative_to(site), f"the package is imported from the wheel ({installed})")

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

    cluster_pkg = resources.files("airflow_volcano_wandb.testing.cluster")
    missing = [p for p in PACKAGE_DATA if not cluster_pkg.joinpath(p).is_file()]
    check(
        not missing,
        "the wheel holds the cluster's Go modules and KWOK stages"
        + (f": missing {missing}" if missing else ""),
    )

    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(dags_folder))
    check(
        bag.import_errors == {},
        "the example DAGs parse" + (f": {bag.import_errors}" if bag.import_errors else ""),
    )
    check(set(bag.dag_ids) == EXAMPLE_DAGS, f"the example DAGs are found: {sorted(bag.dag_ids)}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))

"""The import graph: pure modules stay pure, and nothing outside tests/ imports tests/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_volcano_wandb"

# Modules that must know nothing of Airflow, HTTP or a Kubernetes client.
PURE = [
    "template.py",
    "_template",
    "naming.py",
    "job_status.py",
    "judge.py",
    "outcome.py",
    "cleanup.py",
    "ownership.py",
    "diagnostics.py",
    "permissions.py",
    "wandb_run.py",
    "wandb_env.py",
    "wandb_urls.py",
    "wandb_queue_ref.py",
    "sweep.py",
    "job_facts.py",
    "wandb_backlink.py",
    "log_lines.py",
    "restart_budget.py",
    "secret_digest.py",
    "key_forms.py",
    "volcano_install.py",
]
IMPURE_ROOTS = ("airflow", "kubernetes", "kubernetes_asyncio", "aiohttp", "urllib3", "wandb")
IO_MODULES = (
    "airflow_volcano_wandb.hooks",
    "airflow_volcano_wandb.operators",
    "airflow_volcano_wandb.sensors",
    "airflow_volcano_wandb.triggers",
)


def imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def files(entry: str) -> list[Path]:
    path = PACKAGE / entry
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


@pytest.mark.parametrize("entry", PURE)
def test_pure_modules_import_no_io(entry):
    for path in files(entry):
        bad = {
            name
            for name in imports(path)
            if name.split(".")[0] in IMPURE_ROOTS or name.startswith(IO_MODULES)
        }
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


@pytest.mark.parametrize("folder", ["airflow_volcano_wandb", "bench", "scripts", "dags"])
def test_nothing_outside_the_tests_imports_them(folder):
    for path in sorted((REPO / folder).rglob("*.py")):
        bad = {name for name in imports(path) if name == "tests" or name.startswith("tests.")}
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


def test_the_airflow_shell_and_the_rooms_stay_small():
    """The operator stays a thin shell; a room that grows past ~400 lines holds two concepts."""
    assert len((PACKAGE / "operators" / "volcano.py").read_text().splitlines()) < 300
    product = [p for p in PACKAGE.rglob("*.py") if "testing" not in p.relative_to(PACKAGE).parts]
    too_big = {
        str(p.relative_to(PACKAGE)): n
        for p in product
        if (n := len(p.read_text().splitlines())) > 420
    }
    assert too_big == {}

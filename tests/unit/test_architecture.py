"""The layout's rules (docs/architecture.md), read from the code's imports.

The folders stand in one order, and a folder imports only folders below it. Three layers cut
across the concept folders: pure modules (no Airflow, HTTP or Kubernetes client, and only
other pure modules of the provider), the I/O edges (``hooks/`` and the modules that call
them), and the Airflow shells (``operators/``, ``sensors/``, ``triggers/``, ``links/``),
which nothing below them imports. Imports never form a loop.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_volcano_wandb"
NAME = PACKAGE.name

ROOT_MODULES = {"__init__.py", "__main__.py", "exceptions.py", "versions.py", "airflow_compat.py"}
CONCEPT_FOLDERS = {"template", "job", "wait", "logs", "wandb", "cli"}
SHELLS = ("operators", "sensors", "triggers", "links")
#: The parts the operator and the sensor are made of: below both, imported by them alone.
PARTS = "parts"

# The rooms from the ground up; each imports only rooms below it (links stands with the
# shells: an operator's extra link).
FLOORS = [
    ("versions", "airflow_compat"),
    ("exceptions",),
    ("wandb",),
    ("template",),
    ("hooks",),
    ("job",),
    ("wait",),
    ("logs",),
    ("cli", "links"),
    ("triggers",),
    ("parts",),
    ("operators", "sensors"),
    ("__main__", "__init__"),
]

# Modules that must know nothing of Airflow, HTTP or a Kubernetes client.
PURE = [
    "template",
    "job/ownership.py",
    "job/job_status.py",
    "job/endings.py",
    "job/job_view.py",
    "hooks/volcano_requests.py",
    "job/submission_plan.py",
    "job/job_facts.py",
    "job/gpu_usage.py",
    "job/fit.py",
    "wait/cleanup.py",
    "wait/judge.py",
    "wait/outcome.py",
    "wait/diagnostics.py",
    "wait/restart_budget.py",
    "wait/wandb_stop.py",
    "wait/training_progress.py",
    "wait/stall.py",
    "wait/startup.py",
    "wait/step.py",
    "wait/heap.py",
    "triggers/wait_spec.py",
    "logs/log_lines.py",
    "wandb/key_forms.py",
    "logs/secret_digest.py",
    "wandb/wandb_run.py",
    "wandb/wandb_env.py",
    "wandb/wandb_urls.py",
    "wandb/wandb_queue_ref.py",
    "wandb/wandb_backlink.py",
    "wandb/sweep.py",
    "wandb/deadline.py",
    "wandb/numbers.py",
    "wandb/connection_form.py",
    "cli/permissions.py",
    "cli/volcano_install.py",
    "cli/report.py",
    "cli/setup_checks.py",
    "versions.py",
]
# The I/O edges outside hooks/: they call the hooks, so a hook importing one would loop back.
EDGES = [
    "job/submission.py",
    "job/queue_template.py",
    "job/api_key_secret.py",
    "job/deployment.py",
    "job/fit_check.py",
    "wait/namespace_watch.py",
    "wait/job_watcher.py",
    "wait/pod_watcher.py",
    "wait/job_report.py",
    "wait/step_io.py",
    "wait/wandb_progress.py",
    "logs/master_log.py",
    "logs/log_client.py",
    "cli",
]
IMPURE_ROOTS = ("airflow", "kubernetes", "kubernetes_asyncio", "aiohttp", "urllib3", "wandb")
# The one exception, for what only a DAG file calls: Trigger-form Params built from what the
# renderer enforces. The schemas are computed by pure code; the functions that wrap them in
# Airflow's ``Param`` import it when called, inside the function, never at module level, so
# the renderer and everything below it still load without Airflow.
CALL_TIME_IMPORTS = {"template/trigger_params.py": {"airflow.sdk"}}


def imports(path: Path, *, runtime_only: bool = False, at_load: bool = False) -> set[str]:
    """Modules ``path`` imports; ``from pkg import mod`` counts ``pkg.mod`` when it is one.

    ``at_load``: only what loading the module imports (not inside a function), at run time.
    """
    tree = ast.parse(path.read_text())
    skipped: set[int] = set()
    for node in ast.walk(tree):
        # An import only a type checker runs is no dependency at run time.
        if (runtime_only or at_load) and (
            isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
        ):
            skipped |= {id(child) for child in ast.walk(node)}
        if at_load and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            skipped |= {id(child) for child in ast.walk(node)}
    names = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            for alias in node.names:
                dotted = f"{node.module}.{alias.name}"
                if module_path(dotted) is not None:
                    names.add(dotted)
    return names


def module_path(dotted: str) -> Path | None:
    if not dotted.startswith(NAME):
        return None
    base = REPO.joinpath(*dotted.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def product_files() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "testing" not in p.relative_to(PACKAGE).parts)


def files(entry: str) -> list[Path]:
    path = PACKAGE / entry
    return sorted(path.rglob("*.py")) if path.is_dir() else [path]


def pure_files() -> set[Path]:
    return {path for entry in PURE for path in files(entry)}


def rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


def test_the_root_keeps_only_the_package_face_and_what_every_layer_shares():
    loose = {p.name for p in PACKAGE.glob("*.py")} - ROOT_MODULES
    assert loose == set(), "a module belongs in the folder of its concept"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == CONCEPT_FOLDERS | set(SHELLS) | {"hooks", PARTS}


@pytest.mark.parametrize("entry", PURE)
def test_pure_modules_import_no_io_and_only_pure_modules(entry):
    pure = pure_files()
    for path in files(entry):
        bad = set()
        for name in imports(path):
            target = module_path(name)
            if name.split(".")[0] in IMPURE_ROOTS or (target is not None and target not in pure):
                bad.add(name)
        allowed = CALL_TIME_IMPORTS.get(rel(path), set()) - imports(path, at_load=True)
        bad -= allowed
        # A package's face is checked as the files it hands names on from.
        bad = {name for name in bad if getattr(module_path(name), "name", "") != "__init__.py"}
        assert not bad, f"{rel(path)} imports {sorted(bad)}"


def test_a_call_time_import_stays_inside_its_functions():
    for entry, names in CALL_TIME_IMPORTS.items():
        path = PACKAGE / entry
        assert names <= imports(path), f"{entry} no longer needs its exception: drop it"
        assert not names & imports(path, at_load=True), f"{entry} imports {names} when loaded"


def test_hooks_only_call_the_api_and_import_no_edge_above_them():
    edges = {path for entry in EDGES for path in files(entry)}
    for path in files("hooks"):
        bad = {name for name in imports(path) if module_path(name) in edges}
        assert not bad, f"{rel(path)} imports {sorted(bad)}"


def _room(path: Path) -> str:
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else path.stem


def test_every_folder_imports_only_the_folders_below_it():
    floor = {room: level for level, rooms in enumerate(FLOORS) for room in rooms}
    assert set(floor) >= {_room(p) for p in product_files()}, "a new room needs its floor"
    upward = set()
    for path in product_files():
        here = _room(path)
        for name in imports(path, runtime_only=True):
            target = module_path(name)
            if target is None or (target.parent == PACKAGE and target.name == "__init__.py"):
                continue
            there = _room(target)
            if there != here and floor[there] >= floor[here]:
                upward.add(f"{rel(path)} -> {rel(target)}")
    assert upward == set()


def test_nothing_below_the_airflow_shells_imports_them():
    for path in product_files():
        if rel(path).split("/")[0] in SHELLS:
            continue
        bad = {
            name for name in imports(path) if name.startswith(tuple(f"{NAME}.{s}" for s in SHELLS))
        }
        assert not bad, f"{rel(path)} imports the shells {sorted(bad)}"


def test_only_the_operator_and_the_sensor_import_their_parts():
    """``parts/`` is a layer below the two shells that wait on a job, above the rest."""
    for path in product_files():
        if rel(path).split("/")[0] in ("operators", "sensors", PARTS):
            continue
        bad = {name for name in imports(path) if name.startswith(f"{NAME}.{PARTS}")}
        assert not bad, f"{rel(path)} imports the shells' parts {sorted(bad)}"


def test_imports_never_form_a_loop():
    graph = {
        path: {
            target
            for name in imports(path, runtime_only=True)
            if (target := module_path(name)) is not None
            and target != path
            and target.name != "__init__.py"  # a package face only hands names on
        }
        for path in product_files()
    }
    done: set[Path] = set()

    def visit(path: Path, trail: list[Path]) -> None:
        if path in trail:
            loop = [*trail[trail.index(path) :], path]
            raise AssertionError("import loop: " + " -> ".join(rel(p) for p in loop))
        if path in done:
            return
        for target in sorted(graph.get(path, ())):
            visit(target, [*trail, path])
        done.add(path)

    for path in sorted(graph):
        visit(path, [])


@pytest.mark.parametrize("folder", ["airflow_volcano_wandb", "bench", "scripts", "dags"])
def test_nothing_outside_the_tests_imports_them(folder):
    for path in sorted((REPO / folder).rglob("*.py")):
        bad = {name for name in imports(path) if name == "tests" or name.startswith("tests.")}
        assert not bad, f"{path.relative_to(REPO)} imports {sorted(bad)}"


# Every module the project ships or runs: the provider, the local cluster's half of the
# package, the example trainer, the benchmarks, the scripts and the example DAGs.
SIZED_FOLDERS = ("airflow_volcano_wandb", "packages", "docker", "bench", "scripts", "dags")
MAX_MODULE_LINES = 400


def test_the_airflow_shell_and_the_rooms_stay_small():
    """The operator stays a thin shell; a room that grows past 400 lines holds two concepts."""
    assert len((PACKAGE / "operators" / "volcano.py").read_text().splitlines()) < 250
    too_big = {
        str(path.relative_to(REPO)): n
        for folder in SIZED_FOLDERS
        for path in sorted((REPO / folder).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert too_big == {}


def test_no_function_is_longer_than_80_lines_of_code():
    """Docstrings aside (``render_job`` documents its public keyword parameters in full)."""
    too_long = {}
    for path in product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            first, *rest = node.body
            documented = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            start = rest[0].lineno if documented and rest else first.lineno
            if (length := node.end_lineno - start + 1) > 80:
                too_long[f"{rel(path)}:{node.name}"] = length
    assert too_long == {}

"""The layout's rules, read from docs/architecture.md and held to the code's imports.

The page is the one source: its picture gives the floors (a folder imports only folders below
it), its layers table the Airflow shells, the shells' parts, the I/O edges and the pure modules
(no Airflow, HTTP or Kubernetes client, and only other pure modules of the provider). Imports
never form a loop.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "airflow_volcano_wandb"
NAME = PACKAGE.name
PAGE = (REPO / "docs" / "architecture.md").read_text()


def _picture() -> list[tuple[str, ...]]:
    """The picture's floors from the top down: each line's leading folders (``name/``) and
    root modules (``name.py``), as rooms (``cli``, ``versions``)."""
    block = PAGE.split("```", 2)[1]
    floors = []
    for line in block.splitlines()[2:]:  # the fence's language tag, then the package's line
        rooms = []
        for word in line.split():
            if not word.endswith(("/", ".py")):
                break
            rooms.append(word.removesuffix("/").removesuffix(".py"))
        if rooms:
            floors.append(tuple(rooms))
    return floors


def _layer(name: str) -> str:
    """The modules cell of the layers table's row ``name``."""
    row = re.search(rf"^\| {re.escape(name)} \| (.*?) \|", PAGE, re.M)
    assert row, f"docs/architecture.md's layers table has no row {name!r}"
    return row.group(1)


def _entries(cell: str) -> list[str]:
    """The backticked modules and folders of a cell (``job/fit.py``, ``hooks/``)."""
    return [e.removesuffix("/") for e in re.findall(r"`([a-z_/]+(?:\.py|/))`", cell)]


FLOORS = _picture()[::-1]  # from the ground up
ROOT_MODULES = {f"{room}.py" for floor in FLOORS for room in floor} & {
    p.name for p in PACKAGE.glob("*.py")
}
SHELLS = tuple(_entries(_layer("Airflow shells")))
(PARTS,) = _entries(_layer("the shells' parts"))
EDGES = [e for e in _entries(_layer("I/O edges")) if e != "hooks"]
_PURE_CELL = _layer("pure")
# The one exception, for what only a DAG file calls: a pure module that imports Airflow inside
# its functions, never when loaded, so that it and everything below it load without Airflow.
CALL_TIME_IMPORTS = {
    module: {imported}
    for module, imported in re.findall(
        r"`([a-z_/]+\.py)` imports `([a-z_.]+)` inside its functions", _PURE_CELL
    )
}
PURE = [e for e in _entries(_PURE_CELL) if e not in CALL_TIME_IMPORTS]
IMPURE_ROOTS = ("airflow", "kubernetes", "kubernetes_asyncio", "aiohttp", "urllib3", "wandb")


def test_the_page_names_its_rules():
    """A page edited out of shape must not leave a rule with nothing to check."""
    assert len(FLOORS) >= 10 and ("operators" in FLOORS[-2] or "sensors" in FLOORS[-2])
    assert SHELLS and PARTS and EDGES and PURE and CALL_TIME_IMPORTS
    missing = [e for e in [*PURE, *EDGES] if not (PACKAGE / e).exists()]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"


def test_a_module_the_room_table_calls_pure_is_in_the_pure_layer():
    marked = re.findall(r"`([a-z_/]+\.py)` \(\*pure\*", PAGE)
    assert marked, "the room table marks no module pure"
    pure = {str(path.relative_to(PACKAGE)) for path in pure_files()}
    assert sorted(set(marked) - pure) == []


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
    pictured = {room for floor in FLOORS for room in floor} - {
        p.removesuffix(".py") for p in ROOT_MODULES
    }
    assert folders == pictured


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
    """But the shells' parts hand the trigger its wait (``parts/waiter.py`` builds it)."""
    for path in product_files():
        room = rel(path).split("/")[0]
        if room in SHELLS:
            continue
        shells = [s for s in SHELLS if not (room == PARTS and s == "triggers")]
        bad = {
            name for name in imports(path) if name.startswith(tuple(f"{NAME}.{s}" for s in shells))
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
# package, the example trainer, the benchmarks, the scripts, the example DAGs and the tests.
SIZED_FOLDERS = (
    "airflow_volcano_wandb",
    "packages",
    "docker",
    "bench",
    "scripts",
    "dags",
    "tests",
    "test_support",
)
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


def _wait_types() -> dict[str, str]:
    """The provider's classes named for the wait, with their docstrings."""
    return {
        f"{rel(path)}:{node.name}": ast.get_docstring(node) or ""
        for path in product_files()
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef) and "wait" in node.name.lower()
    }


def test_at_most_four_types_are_named_for_the_wait_each_saying_what_it_is_for():
    """A newcomer who adds a limit to the wait finds one of a few types, each told in one
    sentence (its docstring's first paragraph): the options (``JobWait``), the description
    (``WaitSpec``), the wait the shells hold (``Waiter``) and its end (``WaitResult``)."""
    types = _wait_types()
    assert len(types) <= 4, sorted(types)
    for name, doc in types.items():
        summary = " ".join(doc.split("\n\n")[0].split())  # what follows a blank line: details
        sentences = re.split(r"(?<=[.!?:])\s+(?=[A-Z])", summary)
        assert summary and len(sentences) == 1, f"{name}: {summary!r} is not one sentence"

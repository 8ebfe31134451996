"""What each test uses, read from the code: which tests talk to the W&B stand-in, which drive
the operator with a stub task instance (``tests/repo/test_test_names.py`` holds their names to
it).

A test uses a thing when its body names it, or names a helper, a fixture (a parameter of a
test or fixture, found in its module and the ``conftest.py`` files above it) or a module-level
value that uses it, in ``tests/`` or ``test_support/``, followed through imports.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
#: The rule's word, and the class whose use it marks.
MARKS = {"standin": "WandbStandin", "stub": "StubTaskInstance"}


@dataclass
class Unit:
    """A top-level function, class or module-level value: the names it reads."""

    module: str
    name: str
    names: set[str] = field(default_factory=set)
    attributes: set[tuple[str, str]] = field(default_factory=set)  # (alias, attribute)
    parameters: list[str] = field(default_factory=list)
    fixture: str | None = None  # the fixture name it provides
    test: bool = False


def _dotted(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")


def _path_of(module: str) -> Path | None:
    base = REPO.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _fixture_name(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    for decorator in node.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        target = call.func if call else decorator
        if ast.unparse(target).endswith("fixture"):
            for keyword in call.keywords if call else []:
                if keyword.arg == "name" and isinstance(keyword.value, ast.Constant):
                    return str(keyword.value.value)
            return node.name
    return None


def _reads(node: ast.AST, unit: Unit) -> None:
    for child in ast.walk(node):
        if isinstance(child, ast.Name):
            unit.names.add(child.id)
        elif isinstance(child, ast.Attribute) and isinstance(child.value, ast.Name):
            unit.attributes.add((child.value.id, child.attr))
        if isinstance(child, ast.Attribute):
            unit.attributes.add(("", child.attr))


class Module:
    """One parsed file: its units and what its names are imported from."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = _dotted(path)
        self.imports: dict[str, tuple[str, str | None]] = {}  # alias -> (module, name)
        self.units: dict[str, Unit] = {}
        tree = ast.parse(path.read_text())
        for node in tree.body:
            self._take(node)

    def _take(self, node: ast.stmt) -> None:
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found = (full, None) if _path_of(full) else (node.module, alias.name)
                self.imports[alias.asname or alias.name] = found
        elif isinstance(node, ast.Import):
            for alias in node.names:
                self.imports[alias.asname or alias.name.split(".")[0]] = (alias.name, None)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            self._function(node, node.name)
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    self._function(item, f"{node.name}::{item.name}")
        elif isinstance(node, ast.ClassDef):
            unit = self.units[node.name] = Unit(self.name, node.name)
            _reads(node, unit)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        unit = self.units.setdefault(name.id, Unit(self.name, name.id))
                        _reads(node, unit)

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> None:
        unit = self.units[name] = Unit(self.name, name)
        _reads(node, unit)
        unit.parameters = [a.arg for a in node.args.args + node.args.kwonlyargs]
        unit.fixture = _fixture_name(node)
        unit.test = node.name.startswith("test") and self.path.name.startswith("test_")


class Uses:
    """Which units use which mark, over every module of ``tests/`` and ``test_support/``."""

    def __init__(self) -> None:
        paths = [*REPO.glob("tests/**/*.py"), *REPO.glob("test_support/*.py")]
        self.modules = {m.name: m for m in map(Module, sorted(paths))}
        self._memo: dict[tuple[str, str, str], bool] = {}

    def tests(self) -> Iterator[tuple[str, Unit]]:
        """Each test's node id (as pytest prints it, without parameters) and its unit."""
        for module in self.modules.values():
            for unit in module.units.values():
                if unit.test:
                    yield f"{module.path.relative_to(REPO)}::{unit.name}", unit

    def uses(self, unit: Unit, mark: str) -> bool:
        key = (unit.module, unit.name, mark)
        if key not in self._memo:
            self._memo[key] = False  # a cycle adds nothing
            self._memo[key] = any(self._leads_to(unit, mark))
        return self._memo[key]

    def _leads_to(self, unit: Unit, mark: str) -> Iterator[bool]:
        module = self.modules[unit.module]
        yield MARKS[mark] in unit.names or any(a == MARKS[mark] for _, a in unit.attributes)
        for name in unit.names:
            if (local := module.units.get(name)) is not None and local is not unit:
                yield self.uses(local, mark)
            if (target := self._imported(module, name)) is not None:
                yield self.uses(target, mark)
        for alias, attribute in unit.attributes:
            source, name = module.imports.get(alias, ("", ""))
            imported = self.modules.get(source) if name is None else None
            if imported is not None and (target := imported.units.get(attribute)) is not None:
                yield self.uses(target, mark)
        if unit.test or unit.fixture:
            for parameter in unit.parameters:
                if (fixture := self._fixture(module, parameter, unit)) is not None:
                    yield self.uses(fixture, mark)

    def _imported(self, module: Module, name: str) -> Unit | None:
        source, attribute = module.imports.get(name, ("", None))
        if attribute is None or source not in self.modules:
            return None
        return self.modules[source].units.get(attribute)

    def _fixture(self, module: Module, name: str, asking: Unit) -> Unit | None:
        """The fixture ``name`` as pytest finds it for a test of ``module``: its own, else the
        nearest ``conftest.py``'s (a fixture asking for its own name gets the one above)."""
        folder = module.path.parent
        candidates = [module, *self._conftests(folder)]
        for candidate in candidates:
            for unit in candidate.units.values():
                if unit.fixture == name and unit is not asking:
                    return unit
        return None

    def _conftests(self, folder: Path) -> Iterator[Module]:
        while folder != REPO.parent and REPO in (folder, *folder.parents):
            conftest = folder / "conftest.py"
            if conftest.is_file():
                yield self.modules[_dotted(conftest)]
            folder = folder.parent

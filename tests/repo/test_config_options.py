"""The ``[volcano_wandb]`` settings, three ways: every key the package reads is declared in the
provider's config (``get_provider_info``, which ``airflow config list`` shows) with the code's
own default and a description, and every declared key is documented as ``[volcano_wandb] key``
(backticked) on a page; a page names no key the package does not declare.

The keys read are found in the package's syntax trees: each ``conf.get*("volcano_wandb", key,
fallback=...)``, and where ``key`` is a parameter of the function that reads it
(``triggers/volcano.py``'s ``_seconds``), each call of that function with a literal key. Airflow
reads a declared default before the code's fallback, so the two must agree.
"""

from __future__ import annotations

import ast
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_volcano_wandb import get_provider_info

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "airflow_volcano_wandb"
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTED = re.compile(r"`\[volcano_wandb\] (\w+)`")
SECTION = "volcano_wandb"


@dataclass(frozen=True)
class Read:
    key: str
    where: str  # path:line
    module: str
    fallback: ast.expr | None


def _reads_in(path: Path) -> list[Read]:
    tree = ast.parse(path.read_text())
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
    rel = path.relative_to(ROOT).as_posix()
    reads: list[Read] = []
    # The functions whose key (and fallback) are parameters: name -> (key index, fallback index).
    helpers: dict[str, tuple[int, int | None]] = {}
    # A fallback named by a local (``fallback = DEFAULT_X``) reads as what was assigned to it.
    local: dict[int, ast.expr] = {}
    for func in [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]:
        params = [a.arg for a in func.args.args]
        assigned = {
            n.targets[0].id: n.value
            for n in ast.walk(func)
            if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
        }
        for call in [n for n in ast.walk(func) if _is_conf_read(n)]:
            key, fallback = call.args[1], _keyword(call, "fallback")
            if isinstance(fallback, ast.Name) and fallback.id in assigned:
                local[id(call)] = assigned[fallback.id]
            if isinstance(key, ast.Name) and key.id in params:
                index = params.index(fallback.id) if isinstance(fallback, ast.Name) else None
                helpers[func.name] = (params.index(key.id), index)
    for node in ast.walk(tree):
        if _is_conf_read(node) and isinstance(node.args[1], ast.Constant):
            where = f"{rel}:{node.lineno}"
            fallback = local.get(id(node), _keyword(node, "fallback"))
            reads.append(Read(node.args[1].value, where, module, fallback))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in helpers:
            key_at, fallback_at = helpers[node.func.id]
            key = node.args[key_at]
            if isinstance(key, ast.Constant):
                fallback = node.args[fallback_at] if fallback_at is not None else None
                reads.append(Read(key.value, f"{rel}:{node.lineno}", module, fallback))
    return reads


def _is_conf_read(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr.startswith("get")
        and getattr(node.func.value, "id", None) == "conf"
        and len(node.args) >= 2
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == SECTION
    )


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def reads() -> list[Read]:
    return [r for path in sorted(PACKAGE.rglob("*.py")) for r in _reads_in(path)]


def fallback_value(read: Read) -> Any:
    """The fallback's value: a literal, or a name evaluated in the reading module."""
    if read.fallback is None:
        return None
    if isinstance(read.fallback, ast.Constant):
        return read.fallback.value
    module = importlib.import_module(read.module)
    # The package's own source, evaluated where it stands: a constant's name or an expression.
    return eval(compile(ast.Expression(read.fallback), read.where, "eval"), vars(module))


def same(declared: str, value: Any) -> bool:
    if isinstance(value, bool):
        return declared.strip().lower() == str(value).lower()
    if isinstance(value, int | float):
        return float(declared) == float(value)
    return declared == (value or "")


OPTIONS = get_provider_info()["config"][SECTION]["options"]
READS = reads()


def documented() -> dict[str, list[str]]:
    """Each key a page names, with ``page:line`` of each place."""
    keys: dict[str, list[str]] = {}
    for page in PAGES:
        for n, line in enumerate(page.read_text().splitlines(), 1):
            for key in DOCUMENTED.findall(line):
                keys.setdefault(key, []).append(f"{page.relative_to(ROOT)}:{n}")
    return keys


def test_the_package_reads_settings():
    assert {"defer_after", "pod_check_interval", "deployment"} <= {r.key for r in READS}


@pytest.mark.parametrize("read", READS, ids=lambda r: f"{r.key}@{r.where}")
def test_every_key_read_is_declared_with_the_codes_default(read):
    assert read.key in OPTIONS, (
        f"{read.where} reads [{SECTION}] {read.key}, which get_provider_info does not declare: "
        "`airflow config list` does not show it"
    )
    option = OPTIONS[read.key]
    assert option.get("description", "").strip(), f"{read.key} has no description"
    assert "default" in option, f"{read.key} has no default"
    value = fallback_value(read)
    assert same(option["default"], value), (
        f"{read.key}: declared default {option['default']!r}, {read.where} falls back to {value!r}"
    )


@pytest.mark.parametrize("key", sorted(OPTIONS))
def test_every_declared_key_is_read_and_documented(key):
    assert key in {r.key for r in READS}, f"[{SECTION}] {key} is declared but nothing reads it"
    assert key in documented(), f"no page documents `[{SECTION}] {key}`"


def test_every_documented_key_is_declared():
    unknown = {k: where for k, where in documented().items() if k not in OPTIONS}
    assert not unknown, f"pages document keys the provider does not declare: {unknown}"


def test_a_read_through_a_helper_is_found(tmp_path, monkeypatch):
    import sys

    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    source = tmp_path / "m.py"
    source.write_text(
        "def _seconds(key, default):\n"
        "    return conf.getfloat('volcano_wandb', key, fallback=default)\n"
        "a = _seconds('one', 2.0)\n"
        "b = conf.get('volcano_wandb', 'two', fallback='')\n"
        "def f():\n"
        "    fallback = 5\n"
        "    return conf.getint('volcano_wandb', 'four', fallback=fallback)\n"
        "c = conf.get('core', 'three')\n"
    )
    found = [(r.key, r.where, ast.literal_eval(r.fallback)) for r in _reads_in(source)]
    assert sorted(found) == [("four", "m.py:7", 5), ("one", "m.py:3", 2.0), ("two", "m.py:4", "")]

"""Every test a page names exists: README, CONTRIBUTING and ``docs/*.md`` point readers at the
test that proves a claim, and a renamed or moved test must take the page with it.

A page names a test as ``tests/<path>.py::test_name`` (a class, ``::Class::test_name``, and a
parameter, ``[id]``, may follow), as ``::test_name`` after such a path, or as a backticked
``test_name`` alone. A name without a file belongs to the last test file the same table row
or paragraph named, else to any test file. A name ending in ``...``, ``…`` or ``*`` is a prefix.
The tests are read from the files' syntax trees (functions and methods called ``test*``), so
nothing is imported or collected.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

TOKEN = re.compile(
    r"(?P<path>(?<![\w/.-])tests/[\w/-]+\.py)(?P<parts>(?:::[\w]+(?:\.\.\.|…|\*)?)*)"
    r"|(?<![\w/.])::(?P<cont>\w+(?:\.\.\.|…|\*)?)"
    r"|`(?P<bare>test_\w+(?:\.\.\.|…|\*)?)(?:\[[^\]`]*\])?`"
)

WRAPPED = re.compile(r"(?:\.py::|tests/[\w/-]*/)$")
ITEM = re.compile(r"\s*(?:[-*+]|\d+\.)\s")


@cache
def defined(path: str) -> frozenset[str]:
    """The test ids of the file at ``path`` (repository-relative): ``test_x`` and
    ``Class::test_x``; empty when there is no such file."""
    file = ROOT / path
    if not file.is_file():
        return frozenset()
    ids = set()
    for node in ast.parse(file.read_text()).body:
        if is_test(node):
            ids.add(node.name)
        elif isinstance(node, ast.ClassDef):
            ids |= {f"{node.name}::{item.name}" for item in node.body if is_test(item)}
    return frozenset(ids)


def is_test(node: ast.stmt) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")


@cache
def every_test_file() -> tuple[str, ...]:
    return tuple(p.relative_to(ROOT).as_posix() for p in sorted(ROOT.glob("tests/**/test_*.py")))


def found(path: str | None, name: str) -> bool:
    """``name`` (a prefix when it ends in ``...``) is a test of ``path``, or of any test file."""
    prefix = name.endswith(("...", "…", "*"))
    stem = name.rstrip(".…*")
    files = [path] if path else every_test_file()
    for f in files:
        for test in defined(f):
            if test == stem or (prefix and test.startswith(stem)):
                return True
            if not prefix and test.endswith(f"::{stem}") and "::" not in stem:
                return True
    # A backticked test module's name (``test_job_watcher``) is not a test id.
    return not path and any(Path(f).stem == stem for f in files)


def scopes(text: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` with a marker line ``(0, "")`` where a scope ends: each table
    row is one scope, each list item is one, a paragraph of other lines is one."""
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        line, n = lines[n], n + 1
        first = n
        # A test id wrapped after its ``::`` or a folder's ``/`` reads as one.
        while WRAPPED.search(line) and n < len(lines):
            line, n = line + lines[n].lstrip(), n + 1
        if not line.strip() or line.lstrip().startswith("|") or ITEM.match(line):
            yield 0, ""
        yield first, line
        if line.lstrip().startswith("|"):
            yield 0, ""


def missing_ids(page: Path) -> list[str]:
    """``page:line: id`` of each named test that does not exist."""
    rel = page.relative_to(ROOT).as_posix()
    missing, current = [], None
    for n, line in scopes(page.read_text()):
        if n == 0:
            current = None
            continue
        for m in TOKEN.finditer(line):
            if m["path"]:
                current = m["path"]
                if not (ROOT / current).is_file():
                    missing.append(f"{rel}:{n}: {current} (no such file)")
                    continue
                names = [p for p in m["parts"].split("::") if p]
                if names and not found(current, "::".join(names)):
                    missing.append(f"{rel}:{n}: {current}::{'::'.join(names)}")
            elif m["cont"]:
                if not found(current, m["cont"]):
                    missing.append(f"{rel}:{n}: {current or 'tests/'}::{m['cont']}")
            elif not found(current, m["bare"]):
                missing.append(f"{rel}:{n}: {m['bare']} (not in {current or 'any test file'})")
    return missing


#: A count of a file's or a folder's tests: ```tests/cluster/test_x.py` (11 tests)``.
COUNTED = re.compile(r"`(tests/[\w/.-]*)` \((\d+) tests\b")


def wrong_counts(page: Path) -> list[str]:
    """``page:line: path says N, has M`` for each count of tests that is not the file's or the
    folder's number of test functions (a parametrized one counts once)."""
    rel = page.relative_to(ROOT).as_posix()
    wrong = []
    for n, line in enumerate(page.read_text().splitlines(), 1):
        for path, said in COUNTED.findall(line):
            target = ROOT / path
            files = sorted(target.rglob("test_*.py")) if target.is_dir() else [target]
            has = sum(len(defined(f.relative_to(ROOT).as_posix())) for f in files)
            if has != int(said):
                wrong.append(f"{rel}:{n}: {path} says {said} tests, has {has}")
    return wrong


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_count_of_tests_a_page_gives_is_right(page):
    wrong = wrong_counts(page)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_test_a_page_names_exists(page):
    missing = missing_ids(page)
    assert not missing, "tests the page names that do not exist:\n" + "\n".join(missing)


def test_a_moved_or_renamed_test_is_caught(tmp_path, monkeypatch):
    import sys

    module = sys.modules[__name__]
    (tmp_path / "tests" / "unit").mkdir(parents=True)
    (tmp_path / "tests" / "unit" / "test_a.py").write_text(
        "def test_kept():\n    pass\n\nclass TestK:\n    def test_m(self):\n        pass\n"
    )
    monkeypatch.setattr(module, "ROOT", tmp_path)
    defined.cache_clear()
    every_test_file.cache_clear()
    page = tmp_path / "p.md"
    page.write_text(
        "See `tests/unit/test_a.py::test_kept` and `::test_gone`, `tests/unit/test_a.py`\n"
        "(`test_kept`, `test_moved`), `tests/unit/test_a.py::TestK::test_m`, `test_ke...`.\n"
        "\n"
        "| row | `tests/unit/test_b.py::test_x` |\n"
        "| row | `test_kept[param]` `test_nowhere` |\n"
        "\n"
        "- `tests/unit/test_a.py::test_k*`\n"
        "- `test_m` is TestK's\n"
        "\n"
        "`tests/unit/\n  test_a.py::\n  test_wrapped`\n"
    )
    counted = tmp_path / "c.md"
    counted.write_text("`tests/unit/test_a.py` (2 tests), `tests/unit/` (3 tests)\n")
    try:
        assert wrong_counts(counted) == ["c.md:1: tests/unit/ says 3 tests, has 2"]
        assert missing_ids(page) == [
            "p.md:1: tests/unit/test_a.py::test_gone",
            "p.md:2: test_moved (not in tests/unit/test_a.py)",
            "p.md:4: tests/unit/test_b.py (no such file)",
            "p.md:5: test_nowhere (not in any test file)",
            "p.md:10: tests/unit/test_a.py::test_wrapped",
        ]
    finally:
        defined.cache_clear()
        every_test_file.cache_clear()

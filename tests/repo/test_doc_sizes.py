"""The docs are a reference, not a diary: no page of README, CONTRIBUTING or docs/ over 400
lines (docs/performance.md, whose figures are re-measured, over 300), and docs/ no longer than
when this was first held (issue 50). Dated runs belong in bench/results/ and CHANGELOG.md; a
page that grows past its bound is split by topic, or loses what it says twice."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The most lines a page may have; a page not named here, 400.
BOUNDS = {"docs/performance.md": 300}
#: docs/ in all on 2026-12-06, before issue 50's rewrite began: it may only shrink from here.
DOCS_LINES_BEFORE = 4705


def lines(page: Path) -> int:
    return len(page.read_text().splitlines())


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_page_is_longer_than_its_bound(page):
    rel = page.relative_to(ROOT).as_posix()
    bound = BOUNDS.get(rel, 400)
    assert lines(page) <= bound, f"{rel} has {lines(page)} lines, more than {bound}"


def test_docs_shrink():
    total = sum(lines(p) for p in (ROOT / "docs").glob("*.md"))
    assert total < DOCS_LINES_BEFORE, f"docs/ has {total} lines, {DOCS_LINES_BEFORE} before"

"""Every figure a page quotes from ``bench/results/`` is the file's: the page names the file and
key beside the figure, and this test reads both and compares them.

The convention (README, CONTRIBUTING and ``docs/*.md``): right after a quoted number, on the
same line, an HTML comment (invisible on GitHub, tables included) names where it comes from::

    ratio 2.62 <!-- figure: bench/results/latest.json#e2e_real_airflow.vs_kpo.ratio -->
    done in 6.9 min <!-- figure: bench/results/latest.json#e2e_real_airflow.wall_s /60 -->

The key is a dotted path into the JSON; a list index is a number (``runs.0.p50_s``), and a key
that holds a dot or a space is written in double quotes (``results."seed (dict)".median_ms``).
An optional ``/N`` or ``*N`` converts the file's unit into the page's (seconds to minutes). The
figure is the last number before the comment on its line (``1,000`` reads as 1000); it must
equal the file's value rounded to as many decimals as the page writes. So a page may write
0.104 as ``0.10`` but not as ``0.16``, and a run that rewrites the file fails the page until
the page is updated with it.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]

MARK = re.compile(
    r"<!--\s*figure:\s*(?P<file>bench/results/[\w./-]+\.json)#(?P<key>.+?)"
    r"(?:\s+(?P<op>[/*])\s*(?P<factor>[\d.]+))?\s*-->"
)
NUMBER = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?|-?\d+(?:\.\d+)?")
KEY_PART = re.compile(r'"([^"]+)"|([^.]+)')


def marks(text: str) -> list[tuple[int, str, re.Match[str]]]:
    """``(line number, text before the mark on its line, mark)`` of each figure mark."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        end = 0
        for m in MARK.finditer(line):
            # The figure is the last number between the previous mark and this one.
            found.append((n, line[end : m.start()], m))
            end = m.end()
    return found


def lookup(data: Any, key: str) -> Any:
    """The value at the dotted ``key`` (quoted parts may hold dots; numbers index lists)."""
    for quoted, plain in KEY_PART.findall(key):
        part = quoted or plain
        data = data[int(part)] if isinstance(data, list) else data[part]
    return data


def check(before: str, mark: re.Match[str]) -> str | None:
    """Why the figure before ``mark`` is not the file's, or None when it is."""
    path = ROOT / mark["file"]
    if not path.is_file():
        return f"{mark['file']} does not exist"
    try:
        value = lookup(json.loads(path.read_text()), mark["key"].strip())
    except (KeyError, IndexError, ValueError, TypeError):
        return f"{mark['file']} has no key {mark['key']!r}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"{mark['file']}#{mark['key']} is {value!r}, not a number"
    if mark["op"]:
        factor = float(mark["factor"])
        value = value / factor if mark["op"] == "/" else value * factor
    numbers = NUMBER.findall(before)
    if not numbers:
        return "no number before the mark on its line"
    written = numbers[-1].replace(",", "")
    decimals = len(written.partition(".")[2])
    if round(value, decimals) != round(float(written), decimals):
        return f"the page writes {written}, the file holds {value!r} (to {decimals} decimals)"
    return None


def page_errors(page: Path) -> list[str]:
    rel = page.relative_to(ROOT).as_posix()
    return [
        f"{rel}:{n}: {why} ({m.group(0)})"
        for n, before, m in marks(page.read_text())
        if (why := check(before, m))
    ]


#: A cell that is a measurement: a number and its unit (a cell of prose that names a setting's
#: seconds is not one).
MEASURE = re.compile(r"[*~ ]*\d[\d,.]*\s*(?:ms|s|min|%|MiB|GiB|x|\u00d7)[* ]*")
NAMES_RESULTS = re.compile(r"bench/results/[\w./-]+\.json")


def unmarked_table_figures(text: str) -> list[str]:
    """``line: cell`` of each measurement in a table under a paragraph that names a results
    file, without a mark: such a table quotes the file, so each figure says where from."""
    found, quoting, in_table = [], False, False
    for n, line in enumerate(text.splitlines(), 1):
        row = line.lstrip().startswith("|")
        if not row:
            if in_table or line.startswith("#"):
                quoting = False
            in_table = False
            quoting = quoting or bool(NAMES_RESULTS.search(line))
            continue
        in_table = True
        if quoting and not MARK.search(line):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            found += [f"{n}: {c}" for c in cells[1:] if MEASURE.fullmatch(c)]
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_table_that_quotes_a_results_file_marks_its_figures(page):
    found = unmarked_table_figures(page.read_text())
    rel = page.relative_to(ROOT).as_posix()
    assert not found, f"{rel}: figures without a mark under a results file:\n" + "\n".join(
        f"{rel}:{f}" for f in found
    )


#: A time a sentence states, and what names the bench (a script or a results file).
TIME = re.compile(r"(?<![\w.])\d[\d,.]*\s*(?:ms|s|min|minutes|seconds)\b")
NAMES_BENCH = re.compile(r"bench/[\w./-]+\.(?:py|json)")


def unmarked_prose_figures(text: str) -> list[str]:
    """Each sentence of prose that names a bench script or results file and states a time
    without a mark after it: a figure the bench measured, quoted from no file."""
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        if paragraph.lstrip().startswith(("|", "```")):
            continue
        joined = re.sub(r"\s*\n\s*", " ", paragraph)
        for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z`(])", joined):
            if not NAMES_BENCH.search(sentence):
                continue
            bare = [
                m.group(0)
                for m in TIME.finditer(sentence)
                if not MARK.match(sentence[m.end() :].lstrip())
            ]
            if bare:
                found.append(f"{', '.join(bare)} in: {sentence[:160]}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_a_sentence_that_quotes_the_bench_marks_its_figures(page):
    found = unmarked_prose_figures(page.read_text())
    rel = page.relative_to(ROOT).as_posix()
    assert not found, f"{rel}: bench figures without a mark:\n" + "\n".join(found)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_marked_figure_is_the_results_files(page):
    errors = page_errors(page)
    assert not errors, "figures that are not bench/results' own:\n" + "\n".join(errors)


def test_a_drifted_figure_is_caught(tmp_path, monkeypatch):
    results = tmp_path / "bench" / "results"
    results.mkdir(parents=True)
    (results / "r.json").write_text(
        json.dumps({"a": {"b.c": [1.234, 415.0]}, "n": 1000, "label": "x"})
    )
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "p.md"
    page.write_text(
        'good 1.23 s <!-- figure: bench/results/r.json#a."b.c".0 -->\n'
        'minutes 6.9 <!-- figure: bench/results/r.json#a."b.c".1 /60 -->, '
        "n = 1,000 <!-- figure: bench/results/r.json#n -->\n"
        'stale 1.3 s <!-- figure: bench/results/r.json#a."b.c".0 -->\n'
        "gone 2 <!-- figure: bench/results/r.json#a.missing -->\n"
        "text 3 <!-- figure: bench/results/r.json#label -->\n"
        "no file 1 <!-- figure: bench/results/none.json#a -->\n"
        "no number <!-- figure: bench/results/r.json#n -->\n"
    )
    errors = page_errors(page)
    assert [e.split(":")[1] for e in errors] == ["3", "4", "5", "6", "7"], errors
    assert "the page writes 1.3, the file holds 1.234" in errors[0]


def test_an_unmarked_figure_under_a_results_file_is_caught():
    text = (
        "Writes `bench/results/render.json`:\n\n| case | median |\n| --- | --- |\n"
        "| seed | 0.16 ms |\n| marked | 0.10 ms <!-- figure: bench/results/r.json#a -->|\n\n"
        "| prose | every 2 s, a setting |\n\nAnother paragraph.\n\n| case | median |\n"
        "| --- | --- |\n| free | 3 s |\n"
    )
    assert unmarked_table_figures(text) == ["5: 0.16 ms"]


def test_an_unmarked_bench_figure_in_prose_is_caught():
    text = (
        "Measured: kubelet build 152 s. `bench/real_pods.py`: pods ready 2 s after the job,\n"
        "the master trains 4 s <!-- figure: bench/results/r.json#t -->.\n\n"
        "`bench/run_all.py --only render` writes the file.\n"
    )
    (found,) = unmarked_prose_figures(text)
    assert found.startswith("2 s in: `bench/real_pods.py`"), found

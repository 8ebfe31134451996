"""The README is the front door: it opens with the two commands, stays short, and every link in
it, in CONTRIBUTING.md and in docs/ leads somewhere that exists (file and heading), as does
every repository path they name."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
PAGES = [README, CONTRIBUTING, *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
#: The repository's top-level folders: a path under one of them is the repository's.
REPO_DIRS = (
    "airflow_volcano_wandb",
    "bench",
    "dags",
    "docker",
    "docs",
    "packages",
    "scripts",
    "test_support",
    "tests",
)
#: A path from the repository root, backticked or not (``tests/unit/x.py::test_y``,
#: ``bench/results/latest.{json,md}``, ``dags/``).
ROOTED = re.compile(rf"(?<![\w./-])((?:{'|'.join(REPO_DIRS)})/[\w.*{{}},/-]*)")
#: A backticked module path inside the package (``parts/job_request.py``).
MODULE = re.compile(r"`([\w-]+(?:/[\w-]+)*/[\w-]+\.py)`")
#: The local cluster's distribution fills in the provider's package (``testing/``) from here.
DISTRIBUTIONS = sorted((ROOT / "packages").glob("*/"))


def prose(text: str) -> list[str]:
    """The lines outside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def anchors(path: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation dropped, spaces to hyphens, -N for repeats."""
    seen: dict[str, int] = {}
    ids = set()
    for line in prose(path.read_text()):
        if m := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            ids.add(slug if n == 0 else f"{slug}-{n}")
    return ids


def test_readme_opens_with_the_two_commands():
    text = README.read_text()
    first_block = re.search(r"```bash\n(.*?)```", text, re.S)
    assert first_block, "README.md has no bash block"
    commands = [line.split("#")[0].strip() for line in first_block.group(1).splitlines()]
    assert commands == ["make demo", "make test"]
    # Nothing but the title and the one paragraph that says what it is comes before them.
    before = text[: first_block.start()]
    assert "```" not in before and "\n## " not in before
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test"):
        assert re.search(rf"^{target}:", makefile, re.M), target


def test_readme_is_a_front_door():
    lines = README.read_text().splitlines()
    assert len(lines) <= 200, f"README.md has {len(lines)} lines; move detail into docs/"
    headings = [line for line in prose(README.read_text()) if line.startswith("## ")]
    assert headings == [
        "## What you see in Airflow",
        "## Install into an existing Airflow",
        "## Connecting a real cluster",
        "## Worked example",
        "## Documentation",
    ]


def test_readme_shows_the_airflow_ui_in_pictures_that_exist():
    pictures = re.findall(r"!\[[^\]]+\]\(([^)\s]+)\)", README.read_text())
    assert pictures, "the README shows what a user sees in the Airflow UI"
    for picture in pictures:
        data = (ROOT / picture).read_bytes()
        assert data.startswith(b"\x89PNG") and len(data) > 10_000, picture


def test_readme_links_every_doc_page():
    linked = {Path(target.split("#")[0]) for target in LINK.findall(README.read_text())}
    missing = [
        p.relative_to(ROOT).as_posix()
        for p in [CONTRIBUTING, *(ROOT / "docs").glob("*.md")]
        if p.relative_to(ROOT) not in linked
    ]
    assert not missing, f"README.md does not link {missing}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page):
    broken = []
    for target in LINK.findall("\n".join(prose(page.read_text()))):  # a link may wrap
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        missing_anchor = anchor and dest.suffix == ".md" and anchor not in anchors(dest)
        if not dest.exists() or missing_anchor:
            broken.append(target)
    assert not broken, f"{page.name}: broken links {broken}"


def named_paths(text: str) -> set[str]:
    """The repository paths the prose of ``text`` names, each ``{a,b}`` spelled out; a module
    path inside the package as ``airflow_volcano_wandb/<path>``."""
    lines = "\n".join(prose(text))
    paths = {m.rstrip(".,") for m in ROOTED.findall(lines)}
    paths |= {f"airflow_volcano_wandb/{m}" for m in MODULE.findall(lines) if m not in paths}
    spelled = set()
    for path in paths:
        if m := re.search(r"\{([^{}]*)\}", path):
            spelled |= {
                path[: m.start()] + part + path[m.end() :] for part in m.group(1).split(",")
            }
        else:
            spelled.add(path)
    return spelled


def exists(path: str) -> bool:
    """In the repository, or in a distribution under ``packages/`` (its share of the package);
    a ``*`` matches at least one."""
    return any(
        any(base.glob(path)) if "*" in path else (base / path).exists()
        for base in (ROOT, *DISTRIBUTIONS)
    )


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_named_repository_paths_exist(page):
    missing = sorted(p for p in named_paths(page.read_text()) if not exists(p))
    assert not missing, f"{page.name} names paths that do not exist: {missing}"


def test_a_named_path_is_found_however_it_is_written():
    text = (
        "`tests/unit/x.py::test_y`, see tests/unit/y.py. Writes `bench/results/latest.{json,md}`"
        " (`parts/job_request.py`, `https://e.com/dags/z.py`).\n```\ndags/in_a_fence.py\n```\n"
    )
    assert named_paths(text) == {
        "tests/unit/x.py",
        "tests/unit/y.py",
        "bench/results/latest.json",
        "bench/results/latest.md",
        "airflow_volcano_wandb/parts/job_request.py",
    }
    assert all((ROOT / d).is_dir() for d in REPO_DIRS)
    assert exists("airflow_volcano_wandb/testing/**")  # in packages/pytest-volcano-cluster/
    assert not exists("tests/unit/test_helm_doc.py")  # moved to tests/repo/


def test_contributing_names_only_real_make_targets():
    phony = re.search(r"^\.PHONY:(.*)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    named = set(re.findall(r"`make ([a-z][\w-]*)", CONTRIBUTING.read_text()))
    assert named, "CONTRIBUTING.md names no make target"
    assert named <= set(phony), f"not in the Makefile: {sorted(named - set(phony))}"

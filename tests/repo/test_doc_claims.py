"""Claims of the README, CONTRIBUTING and docs/ that a new user acts on, each compared with
what makes it true: the scripts, the Makefile, the test files and the code. Each of these was
once false (issue 50); the test names what to change when it fails again.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text()
#: The README up to its first section: what a reader sees before the two commands run.
README_TOP = README[: README.index("\n## ")]
DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|min|minutes)\b")


def joined(text: str) -> str:
    """``text`` with its line breaks as spaces: a claim may wrap."""
    return re.sub(r"\s*\n\s*", " ", text)


def _marks_long(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(n, ast.Attribute) and n.attr == "long" for n in ast.walk(tree))


def test_the_readme_says_up_front_what_the_two_commands_need():
    """Root for apt and each package the install script adds, Go, disk and the first run's
    time, before the first section; not behind a link."""
    script = (ROOT / "scripts/install-system-deps.sh").read_text()
    # The branch without --real-node: what `make test` and `make demo` install.
    default = script[script.index("\nelse\n") : script.index("\nfi\n")]
    packages = set(re.findall(r"packages\+=\(([^)]*)\)", default))
    names = {name for group in packages for name in group.split()}
    assert {"chromium", "postgresql"} <= names, names
    top = joined(README_TOP)
    missing = [n for n in sorted(names) if f"`{n}`" not in top]
    assert not missing, f"README's opening does not name what apt installs: {missing}"
    for needed in ("root", "Go ≥", "GB of disk", "Python 3.11", "minutes"):
        assert needed.lower() in top.lower(), f"README's opening does not say it needs {needed!r}"


def test_the_readmes_first_run_time_is_the_measured_cold_build():
    cold = (ROOT / "docs/local-cluster.md").read_text()
    (minutes,) = re.findall(r"^\| Cold build .*?\((\d+) min\)", cold, re.M)
    assert f"about {minutes} minutes on an idle 2-core machine" in joined(README_TOP), minutes
    assert f"about {minutes} minutes on an idle 2-core machine" in joined(CONTRIBUTING), minutes


def test_the_readme_says_what_each_command_prints_when_done():
    demo = (ROOT / "scripts/demo.py").read_text()
    assert '"\\nDemo " + ("succeeded"' in demo, "scripts/demo.py's last line changed"
    top = joined(README_TOP)
    assert "`Demo succeeded`" in top and "`Demo FAILED`" in top
    assert "pytest's summary" in top


def test_make_test_long_names_every_file_that_marks_a_test_long():
    files = sorted(
        p.relative_to(ROOT).as_posix() for p in ROOT.glob("tests/**/test_*.py") if _marks_long(p)
    )
    assert "tests/reliability/test_e2e_real_airflow.py" in files
    (row,) = [line for line in CONTRIBUTING.splitlines() if line.startswith("| `make test-long`")]
    missing = [f for f in files if f"`{f}`" not in row]
    assert not missing, f"CONTRIBUTING's make test-long row does not name {missing}"


def test_no_page_gives_make_test_long_a_time_nobody_measured():
    """Its whole time has not been measured: a page says so rather than guess."""
    for name, text in (("README.md", README), ("CONTRIBUTING.md", CONTRIBUTING)):
        for after in re.findall(r"`make test-long`([^()|]*)", joined(text)):
            assert not re.search(r"about \d+ min", after), f"{name}: `make test-long`{after}"
    (row,) = [line for line in CONTRIBUTING.splitlines() if line.startswith("| `make test-long`")]
    assert "not measured" in row and "about 40 min" not in row


def test_contributing_gives_make_test_compat_ci_one_time():
    """Each place that times it, the CI paragraph and the clean-clone run, says the same."""
    text = joined(CONTRIBUTING)
    times = set()
    for after in re.findall(r"`make test-compat-ci`(.*?)(?=`make |$)", text):
        times |= {m.group(0) for m in DURATION.finditer(after[:200])}
    assert len(times) == 1, f"make test-compat-ci is timed as {sorted(times)}"


def test_the_pages_say_every_question_the_triggerer_asks_w_and_b():
    """A network policy is written from these lines: each question of ``WandbProgress`` is
    named where security.md and helm.md say what the triggerer reaches W&B for."""
    source = (ROOT / "airflow_volcano_wandb/wait/wandb_progress.py").read_text()
    (cls,) = [
        n
        for n in ast.parse(source).body
        if isinstance(n, ast.ClassDef) and n.name == "WandbProgress"
    ]
    asks = {
        n.name
        for n in cls.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and not n.name.startswith("_")
    }
    said = {"last_step": "stall_timeout", "progress": "progress", "stopped": "stopped from W&B"}
    assert asks == set(said), f"WandbProgress asks {sorted(asks)}: say each in the pages"
    security = joined((ROOT / "docs/security.md").read_text())
    (item,) = re.findall(r"No trigger argument holds the key\.(.*?)(?= - |$)", security)
    helm = joined((ROOT / "docs/helm.md").read_text())
    (line,) = re.findall(r"\*\*From the Airflow workers and triggerer\*\*(.*?)(?= - |$)", helm)
    for page, text in (("security.md", item), ("helm.md", line)):
        missing = [phrase for phrase in said.values() if phrase not in text]
        assert not missing, f"docs/{page} does not say the triggerer asks W&B for {missing}"
        assert "one thing only" not in text


def test_no_page_shows_an_image_tagged_latest():
    """The example DAGs never use ``:latest`` (docs/example-dags.md), nor may a page's."""
    manual = (ROOT / "dags/volcano_pytorch_manual.py").read_text()
    (image,) = re.findall(r'"default_image", fallback="([^"]+)"', manual)
    security = (ROOT / "docs/security.md").read_text()
    (shown,) = re.findall(r"^default_image = (\S+)", security, re.M)
    assert shown == image, f"security.md's default_image {shown}, the manual DAG's {image}"
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        tagged = re.findall(r"[\w./-]+:latest\b", page.read_text())
        assert not tagged, f"{page.name} shows {tagged}"


def test_wandb_md_counts_the_operations_the_stand_in_answers():
    answered = set()
    for path in sorted((ROOT / "test_support").glob("wandb_standin*.py")):
        answered |= set(re.findall(r"def _op_(\w+)", path.read_text()))
    page = joined((ROOT / "docs/wandb.md").read_text())
    said = re.findall(r"answers (\d+) GraphQL operations", page)
    assert said, "docs/wandb.md does not say how many GraphQL operations the stand-in answers"
    assert said == [str(len(answered))], f"the stand-in answers {len(answered)}, the page {said}"

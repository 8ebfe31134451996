""".ci/run, with every ``make`` it calls stood in by a script that records it: the steps run in
order, both clusters are stopped at the end however the run ends, and a failing step's exit
code is the run's (an EXIT trap that broke under ``set -u`` once turned a green run red)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import tomllib

REPO = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, failing: str | None) -> tuple[int, list[str]]:
    (tmp_path / ".ci").mkdir()
    shutil.copy(REPO / ".ci" / "run", tmp_path / ".ci" / "run")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "make"
    fake.write_text(
        "#!/usr/bin/env bash\n"
        f'echo "$*" >> "{tmp_path}/calls"\n'
        f'[ "$1" = "{failing or "-"}" ] && exit 7\n'
        "exit 0\n"
    )
    fake.chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path)}
    done = subprocess.run(["bash", ".ci/run"], cwd=tmp_path, env=env, capture_output=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    return done.returncode, [call.split()[0] for call in calls]


def test_every_step_runs_in_order_and_both_clusters_are_stopped(tmp_path):
    code, steps = _run(tmp_path, failing=None)
    assert code == 0
    assert steps == [
        "lint",
        "cluster-up",
        "test",
        "test-compat-ci",
        "check-wheel",
        "cluster-down",
        "demo",
        "cluster-down",
        "cluster-down",
    ]


def test_a_failing_step_fails_the_run_and_the_clusters_are_still_stopped(tmp_path):
    code, steps = _run(tmp_path, failing="test")
    assert code == 7
    assert steps == ["lint", "cluster-up", "test", "cluster-down", "cluster-down"]


def test_lint_and_pre_commit_run_mypy_strict_on_template_wait_and_job():
    """CI's `make lint` step type-checks the package, pre-commit runs the same commands, and
    the rooms issue 52 types end to end are checked strictly."""
    recipe = re.search(r"^lint:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M)
    assert recipe is not None
    commands = [line.strip().replace("$(BIN)", ".venv/bin") for line in recipe[1].splitlines()]
    assert ".venv/bin/mypy" in commands
    hooks = (REPO / ".pre-commit-config.yaml").read_text()
    for command in commands:
        assert f"entry: {command}\n" in hooks
    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert mypy["files"] == ["airflow_volcano_wandb"]
    strict = next(o for o in mypy["overrides"] if o.get("disallow_untyped_defs"))
    rooms = {"airflow_volcano_wandb.template.*", "airflow_volcano_wandb.wait.*"}
    assert rooms | {"airflow_volcano_wandb.job.*"} <= set(strict["module"])
    assert strict["warn_return_any"] and strict["disallow_any_generics"]

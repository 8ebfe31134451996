"""What a company checks before it adopts the package, as the repository declares it: the
Apache-2.0 license (the file, and the SPDX expression pyproject gives), a CHANGELOG.md entry for
the package's version, a note on reporting a vulnerability, and a Python range and classifiers
that claim no more than is tested (3.11). ``make check-wheel`` checks the built artifacts."""

from __future__ import annotations

import re
from pathlib import Path

import tomllib

import airflow_volcano_wandb

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
PROJECT = PYPROJECT["project"]
#: The Python versions the project is tested on: make test's venv, make test-compat's, CI's.
TESTED_PYTHONS = ("3.11",)


def test_the_license_file_is_the_apache_2_license_pyproject_declares():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "TERMS AND CONDITIONS FOR USE, REPRODUCTION, AND DISTRIBUTION" in text
    assert "END OF TERMS AND CONDITIONS" in text
    # An SPDX expression and a License classifier together are refused by setuptools (PEP 639).
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]


def changelog_versions() -> list[str]:
    return re.findall(r"^## (\d+\.\d+\.\d+\S*)", (ROOT / "CHANGELOG.md").read_text(), re.M)


def test_the_packages_version_has_a_changelog_entry():
    versions = changelog_versions()
    assert PROJECT["version"] == airflow_volcano_wandb.__version__
    assert airflow_volcano_wandb.__version__ in versions, (
        f"CHANGELOG.md has no section for {airflow_volcano_wandb.__version__} ({versions})"
    )
    assert versions[0] == airflow_volcano_wandb.__version__, "the newest version comes first"


def test_the_python_range_and_classifiers_claim_only_the_tested_versions():
    assert PROJECT["requires-python"] == ">=3.11,<3.12"
    claimed = {
        c.rsplit(":: ", 1)[1]
        for c in PROJECT["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    }
    assert claimed == set(TESTED_PYTHONS)
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PY \?= python3\.11$", makefile, re.M), "make's Python is not 3.11"
    dockerfile = (ROOT / "docker/airflow/Dockerfile").read_text()
    assert "-python3.11" in dockerfile


def test_the_sdist_and_wheel_are_declared_to_carry_the_changelog_and_security_note():
    manifest = (ROOT / "MANIFEST.in").read_text()
    assert "include CHANGELOG.md SECURITY.md" in manifest
    data = PYPROJECT["tool"]["setuptools"]["data-files"]
    assert data == {"share/doc/airflow-volcano-wandb": ["CHANGELOG.md", "SECURITY.md"]}
    security = (ROOT / "SECURITY.md").read_text()
    assert "## Reporting a vulnerability" in security
    check_wheel = (ROOT / "scripts/check-wheel.sh").read_text()
    for checked in ("licenses/LICENSE", "License-Expression: Apache-2.0", "CHANGELOG.md"):
        assert checked in check_wheel, f"make check-wheel does not check {checked}"

"""The Go modules that build the local cluster pin the releases ``versions.py`` names.

``versions.py`` is what docs, hints and the binary cache keys cite; the go.mod files are what
is actually compiled. If they drift apart, the cluster tests would silently test another
release than the one the project claims.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from airflow_volcano_wandb import versions
from airflow_volcano_wandb.testing.cluster import build

_LINE = re.compile(r"^\s*(?:require\s+)?(\S+)\s+(v\S+)")


def _pins(go_mod: Path) -> dict[str, str]:
    """Required module -> version; a ``replace`` of that module (``=>`` target) wins."""
    required: dict[str, str] = {}
    replaced: dict[str, str] = {}
    for line in go_mod.read_text().splitlines():
        line = line.split("//", 1)[0]
        if "=>" in line:
            source, target = line.split("=>", 1)
            found = _LINE.match(target)
            if found:
                replaced[source.split()[-1]] = found.group(2)
        else:
            found = _LINE.match(line)
            if found and found.group(1) not in ("go", "module", "tool", "toolchain"):
                required[found.group(1)] = found.group(2)
    return {**required, **replaced}


def _go_mod(module_dir: str) -> dict[str, str]:
    return _pins(build.GO_DIR / module_dir / "go.mod")


def test_the_pin_parser_reads_require_and_replace(tmp_path):
    go_mod = tmp_path / "go.mod"
    go_mod.write_text(
        "module x\n\ngo 1.25.0\n\nreplace (\n\tk8s.io/api => k8s.io/api v0.35.3\n)\n\n"
        "require (\n\tk8s.io/api v0.30.0 // indirect\n\tvolcano.sh/volcano v1.14.1\n)\n"
        "require sigs.k8s.io/kwok v0.8.0\n"
    )
    assert _pins(go_mod) == {
        "k8s.io/api": "v0.35.3",
        "volcano.sh/volcano": "v1.14.1",
        "sigs.k8s.io/kwok": "v0.8.0",
    }


@pytest.mark.parametrize(
    ("module_dir", "module", "version"),
    [
        ("controlplane", "k8s.io/kubernetes", versions.KUBERNETES_VERSION),
        ("controlplane", "go.etcd.io/etcd/server/v3", versions.ETCD_VERSION),
        ("volcano", "volcano.sh/volcano", versions.VOLCANO_VERSION),
        ("kwok", "sigs.k8s.io/kwok", versions.KWOK_VERSION),
        ("node", "k8s.io/kubernetes", versions.KUBERNETES_VERSION),
        ("coredns", "github.com/coredns/coredns", versions.COREDNS_VERSION),
    ],
)
def test_go_mod_pins_the_targeted_release(module_dir, module, version):
    assert _go_mod(module_dir)[module] == version


def test_kubernetes_staging_modules_match_the_kubernetes_release():
    # k8s.io/kubernetes v1.X.Y is consumed with its staging modules at v0.X.Y.
    staging = "v0." + versions.KUBERNETES_VERSION.removeprefix("v1.")
    for module_dir in ("controlplane", "node"):
        pins = _go_mod(module_dir)
        for module in ("k8s.io/api", "k8s.io/apiserver", "k8s.io/client-go"):
            assert pins[module] == staging, (module_dir, module)


def test_every_component_is_built_at_its_go_mod_pin():
    for component in build.COMPONENTS:
        pins = _go_mod(component.module_dir)
        # The module of a package is the longest pinned prefix of its import path.
        module = max((m for m in pins if component.package.startswith(m)), key=len)
        assert pins[module] == component.version, component.name


def test_every_supported_airflow_minor_has_the_release_test_compat_installs():
    import tomllib
    from packaging.version import Version

    releases = versions.AIRFLOW_COMPAT_RELEASES
    assert list(releases) == ["3.0", "3.1", "3.2", "3.3"]
    assert releases["3.3"] == versions.AIRFLOW_VERSION  # the project venv's
    for minor, release in releases.items():
        assert Version(release).release[:2] == Version(minor).release, (minor, release)
    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    project = tomllib.loads(pyproject.read_text())["project"]
    assert versions.AIRFLOW_FLOOR in releases
    assert f"apache-airflow>={versions.AIRFLOW_FLOOR},<4" in project["dependencies"]

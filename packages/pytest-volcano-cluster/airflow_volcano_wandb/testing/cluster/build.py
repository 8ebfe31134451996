"""Build the cluster's binaries from the Go modules pinned in ``go/`` and cache them by version.

Three Go modules, because each program is built against the Kubernetes libraries it was
released with, and in one module minimal version selection would force a single set:

- ``controlplane``: etcd and Kubernetes, every ``k8s.io/*`` staging module replaced by its
  published ``v0.x`` twin (how Kubernetes itself is consumed as a library);
- ``volcano``: Volcano with the libraries of its own go.mod. Volcano keeps ``volcano.sh/apis``
  in-tree; the targeted release builds against the published apis of its minor version;
- ``kwok``: KWOK, which needs newer client libraries than the other two.

The releases are those of :mod:`airflow_volcano_wandb.versions`; the go.mod files must pin the
same (``tests/unit/test_versions.py`` checks).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from airflow_volcano_wandb.versions import (
    COREDNS_VERSION,
    ETCD_VERSION,
    KUBERNETES_VERSION,
    KWOK_VERSION,
    VOLCANO_VERSION,
)

GO_DIR = Path(__file__).parent / "go"


@dataclass(frozen=True)
class Component:
    """A binary the cluster runs: where its main package lives and which release it is."""

    name: str
    package: str
    module_dir: str
    version: str


# Build order is start order: a cold build gets the apiserver side usable first, and the
# shared Kubernetes packages are compiled once (the Go build cache) by the first of them.
COMPONENTS: tuple[Component, ...] = (
    Component("etcd", "go.etcd.io/etcd/server/v3", "controlplane", ETCD_VERSION),
    Component(
        "kube-apiserver", "k8s.io/kubernetes/cmd/kube-apiserver", "controlplane", KUBERNETES_VERSION
    ),
    Component(
        "kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "controlplane",
        KUBERNETES_VERSION,
    ),
    Component(
        "vc-webhook-manager", "volcano.sh/volcano/cmd/webhook-manager", "volcano", VOLCANO_VERSION
    ),
    Component("vc-scheduler", "volcano.sh/volcano/cmd/scheduler", "volcano", VOLCANO_VERSION),
    Component(
        "vc-controller-manager",
        "volcano.sh/volcano/cmd/controller-manager",
        "volcano",
        VOLCANO_VERSION,
    ),
    Component("kwok", "sigs.k8s.io/kwok/cmd/kwok", "kwok", KWOK_VERSION),
)
BY_NAME = {c.name: c for c in COMPONENTS}

# The real node (``--real-node``): kubelet in a module of its own, so adding it leaves the
# control plane's go.sum, and with it the cached apiserver binaries, untouched; beside it the
# pod sandbox's pause program, and CoreDNS with only the plugins the cluster DNS needs.
NODE_COMPONENTS: tuple[Component, ...] = (
    Component("kubelet", "k8s.io/kubernetes/cmd/kubelet", "node", KUBERNETES_VERSION),
    Component("pause", "github.com/airflow-volcano-wandb/testing/node/pause", "node", "1"),
    Component(
        "coredns", "github.com/airflow-volcano-wandb/testing/coredns", "coredns", COREDNS_VERSION
    ),
)


class BuildError(RuntimeError):
    """A component failed to build; the message carries the compiler output tail."""


def cache_root() -> Path:
    """Where binaries are kept: ``$AVW_CACHE_DIR`` or ``$XDG_CACHE_HOME/airflow-volcano-wandb``."""
    override = os.environ.get("AVW_CACHE_DIR")
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "airflow-volcano-wandb"


def _module_fingerprint(module_dir: str) -> str:
    # go.sum pins every module in the build, so a changed pin gets a fresh cache entry; so
    # does a change to a module's own Go sources (the real node's pause and CoreDNS mains).
    digest = hashlib.sha256()
    for name in ("go.mod", "go.sum"):
        digest.update((GO_DIR / module_dir / name).read_bytes())
    for source in sorted((GO_DIR / module_dir).rglob("*.go")):
        digest.update(source.read_bytes())
    return digest.hexdigest()[:12]


def binary_path(component: Component) -> Path:
    key = f"{component.name}-{component.version}-{_module_fingerprint(component.module_dir)}"
    return cache_root() / "bin" / key / component.name


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        for candidate in ("/usr/local/go/bin/go", str(Path.home() / "go" / "bin" / "go")):
            if Path(candidate).exists():
                return candidate
        raise BuildError("the `go` toolchain (1.26+) is needed to build the local cluster")
    return go


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_component(component: Component) -> Path:
    """Build one binary into the cache unless it is there; return its path.

    Two processes that start a cluster at once (two pytest sessions, a `cluster up` beside a
    test run) build each binary once: the second waits on the first's lock, then finds it.
    """
    target = binary_path(component)
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with (target.parent / ".build.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if target.exists():
            return target
        return _build(component, target)


def _build(component: Component, target: Path) -> Path:
    log_path = target.parent / "build.log"
    partial = target.with_name(target.name + ".partial")
    _say(f"[cluster] building {component.name} {component.version} (first run only) ...")
    started = time.monotonic()
    env = dict(os.environ)
    # The binaries only run on this machine; cgo would need a C toolchain for nothing.
    env.setdefault("CGO_ENABLED", "0")
    env.setdefault("GOFLAGS", "-buildvcs=false")
    cmd = [
        _go(),
        "build",
        "-trimpath",
        "-ldflags=-s -w",
        "-o",
        str(partial),
        component.package,
    ]
    with log_path.open("w") as log:
        proc = subprocess.run(
            cmd,
            cwd=GO_DIR / component.module_dir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-30:])
        raise BuildError(f"building {component.name} failed (log {log_path}):\n{tail}")
    partial.rename(target)  # atomic, so a half-written binary is never mistaken for a cached one
    _say(f"[cluster] built {component.name} in {time.monotonic() - started:.0f}s")
    return target


def ensure_binaries() -> dict[str, Path]:
    """Make sure every component binary exists, building missing ones in start order."""
    return {c.name: build_component(c) for c in COMPONENTS}


def ensure_node_binaries() -> dict[str, Path]:
    """The real node's binaries (``up --real-node``), built when missing."""
    return {c.name: build_component(c) for c in NODE_COMPONENTS}


def module_file(module: str, version: str, relative: str) -> Path:
    """A file inside a downloaded Go module (CRD manifests ship in the Volcano and KWOK modules)."""
    gomodcache = os.environ.get("GOMODCACHE")
    if not gomodcache:
        out = subprocess.run(
            [_go(), "env", "GOMODCACHE"], capture_output=True, text=True, check=True
        )
        gomodcache = out.stdout.strip()
    # The module cache escapes upper-case letters in paths as "!" + lower-case.
    escaped = "".join(f"!{ch.lower()}" if ch.isupper() else ch for ch in module)
    root = Path(gomodcache) / f"{escaped}@{version}"
    if not root.exists():
        module_dir = {"sigs.k8s.io/kwok": "kwok", "volcano.sh/volcano": "volcano"}.get(
            module, "controlplane"
        )
        subprocess.run(
            [_go(), "mod", "download", f"{module}@{version}"],
            cwd=GO_DIR / module_dir,
            check=True,
            capture_output=True,
        )
    return root / relative

"""Build an Airflow image holding the provider's wheel, without a Docker engine or registry.

What ``docker/airflow/Dockerfile`` makes from ``apache/airflow`` (Airflow and the provider's
wheel), built as the trainer image is (``image.py``): ``mmdebstrap`` makes a Debian bookworm
root file system (Python 3.11), and uv installs into it, from this machine's uv cache and PyPI,
``apache-airflow[postgres]``, the Kubernetes provider and the provider's dependencies, each
pinned to the version this checkout's venv holds (its ``uv pip freeze`` is the constraint
file), so the pods run the Airflow the suite tests. That is the base layer, cached by the hash
of the pins; the provider's own wheel, built from the checkout, is the top layer (installed
``--no-deps``), so a change to the provider rebuilds seconds, not minutes. Runs as uid 50000
with ``AIRFLOW_HOME=/opt/airflow``, as the official image does. Differences from the official
image, said here so nobody reads more into it: no ``airflow`` entry-point script (the pods run
``python3 -m airflow ...``), no gosu/tini, Debian's Python 3.11.2. Like the official image it
has ``python`` (a link to ``python3``, in the top layer): the KubernetesExecutor's task pods run
``python -m airflow.sdk.execution_time.execute_workload``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from airflow_volcano_wandb.testing.cluster import build, image

AIRFLOW_IMAGE = "avw-airflow:rootless"
AIRFLOW_UID = 50000
DEBIAN_PACKAGES = ("python3", "ca-certificates", "procps")
SITE = "usr/local/lib/python3.11/dist-packages"
# The target of uv's resolution: Debian bookworm's glibc 2.36 and Python 3.11.
PLATFORM = ("--python-version", "3.11", "--python-platform", "x86_64-manylinux_2_36")
REQUIREMENTS = (
    "apache-airflow[postgres]",
    "apache-airflow-providers-cncf-kubernetes",
    "wandb",
    "pyyaml",
    "tenacity",
    "aiohttp",
    "urllib3",
)
#: What the top layer holds besides the provider (part of the image's cache key).
TOP_LAYER = "provider wheel, /usr/local/bin/python"
VERSIONS_CHECK = (
    "import airflow, airflow.providers.cncf.kubernetes, wandb, kubernetes; "
    "print('airflow', airflow.__version__, 'wandb', wandb.__version__)"
)


def _say(message: str) -> None:
    build._say(f"[airflow-image] {message}")


def uv() -> str:
    found = shutil.which("uv") or str(build.cache_root() / "bootstrap" / "bin" / "uv")
    if not Path(found).exists():
        raise FileNotFoundError("no uv: run `make venv` first (scripts/bootstrap-venv.sh)")
    return found


def repo_root() -> Path:
    return image.trainer_dir().parents[1]


def constraints() -> str:
    """The venv's pins (``uv pip freeze``), less the editable installs of this checkout."""
    venv_python = repo_root() / ".venv" / "bin" / "python"
    frozen = subprocess.run(
        [uv(), "pip", "freeze", "--python", str(venv_python)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    return "\n".join(line for line in frozen if line and not line.startswith("-e ")) + "\n"


def _base_layer(pins: str) -> Path:
    key = image._digest(pins.encode(), " ".join(DEBIAN_PACKAGES + REQUIREMENTS).encode())
    layer = image.images_dir() / f"airflow-base-{key}.tar"
    if layer.exists():
        return layer
    started = time.monotonic()
    _say(f"building Airflow's base layer (mmdebstrap + uv; first run only) -> {layer}")
    with tempfile.TemporaryDirectory(dir=image.images_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        image.debian_rootfs(rootfs, DEBIAN_PACKAGES)
        pins_file = Path(tmp) / "constraints.txt"
        pins_file.write_text(pins)
        subprocess.run(
            [
                uv(),
                "pip",
                "install",
                "--target",
                str(rootfs / SITE),
                *PLATFORM,
                "--constraint",
                str(pins_file),
                "--link-mode=copy",
                *REQUIREMENTS,
            ],
            check=True,
        )
        with (rootfs / "etc" / "passwd").open("a") as passwd:
            passwd.write(f"airflow:x:{AIRFLOW_UID}:0::/home/airflow:/bin/sh\n")
        for home in ("home/airflow", "opt/airflow"):
            (rootfs / home).mkdir(parents=True, exist_ok=True)
            os.chown(rootfs / home, AIRFLOW_UID, 0)
        (rootfs / "etc" / "resolv.conf").write_text("")  # the kubelet mounts the pod's own
        for junk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        check = subprocess.run(
            ["chroot", str(rootfs), "python3", "-c", VERSIONS_CHECK],
            check=True,
            capture_output=True,
            text=True,
            env=image.CHROOT_ENV,
        )
        _say(check.stdout.strip())
        partial = layer.with_suffix(".partial")
        image._tar_dir(rootfs, partial)
        partial.rename(layer)
    _say(f"base layer built in {time.monotonic() - started:.0f}s")
    return layer


def _provider_layer(out_dir: Path) -> Path:
    """The provider's wheel, built from the checkout's last commit (``git archive HEAD``: never
    an edit in progress) and unpacked into the site (no deps)."""
    source = out_dir / "source"
    source.mkdir()
    archive = subprocess.run(
        ["git", "-C", str(repo_root()), "archive", "HEAD"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive, check=True)
    wheels = out_dir / "wheel"
    subprocess.run(
        [uv(), "build", "--wheel", "--out-dir", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("airflow_volcano_wandb-*.whl")
    staged = out_dir / "layer"
    subprocess.run(
        [
            uv(),
            "pip",
            "install",
            "--target",
            str(staged / SITE),
            *PLATFORM,
            "--no-deps",
            "--link-mode=copy",
            str(wheel),
        ],
        check=True,
        capture_output=True,
    )
    local_bin = staged / "usr" / "local" / "bin"
    local_bin.mkdir(parents=True, exist_ok=True)
    (local_bin / "python").symlink_to("/usr/bin/python3")  # what the executor's pods call
    layer = out_dir / "provider.tar"
    image._tar_dir(staged, layer)
    return layer


def _sources_key() -> bytes:
    """The tree of the last commit, which the provider's layer is built from."""
    tree = ["git", "-C", str(repo_root()), "rev-parse", "HEAD^{tree}"]
    return subprocess.run(tree, check=True, capture_output=True).stdout.strip()


def airflow_image() -> Path:
    """The Airflow image's docker-archive tar, built unless cached; returns its path."""
    pins = constraints()
    base = _base_layer(pins)
    key = image._digest(base.name.encode(), _sources_key(), TOP_LAYER.encode())
    out = image.images_dir() / f"airflow-{key}.tar"
    if out.exists():
        return out
    with tempfile.TemporaryDirectory(dir=image.images_dir()) as tmp:
        provider = _provider_layer(Path(tmp))
        config = {
            "Env": [
                "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                "PYTHONUNBUFFERED=1",
                "AIRFLOW_HOME=/opt/airflow",
                "HOME=/home/airflow",
            ],
            "WorkingDir": "/opt/airflow",
            "User": str(AIRFLOW_UID),
        }
        image.write_docker_archive(out, AIRFLOW_IMAGE, [base, provider], config)
    for stale in image.images_dir().glob("airflow-*.tar"):  # keep the newest image only
        if stale not in (out, base) and not stale.name.startswith("airflow-base-"):
            stale.unlink()
    return out


if __name__ == "__main__":
    print(airflow_image())

"""Build the trainer image (and the node's pause image) without a Docker engine or registry.

The trainer image follows ``docker/trainer``'s recipe: the pip packages of
``docker/trainer/requirements.txt`` (every line but ``torch``) over a Debian bookworm root file
system, whose Python is the same 3.11 as the Dockerfile's ``python:3.11-slim``, and the same
files (``TRAINER_FILES``) with ``launch.py`` as the entry point, run as uid 1000 with
``WANDB_DIR=/tmp``. One difference, forced by the machines this runs on: PyTorch's CPU wheel
index is not reachable from them (only PyPI and Debian are), and PyPI's Linux wheels bring
several GB of CUDA libraries, so torch is Debian's own ``python3-torch`` (CPU, 1.13) instead of
the CPU wheel the Dockerfile installs; ``DEBIAN_PACKAGES`` names it. The root file system is
made by ``mmdebstrap`` from Debian's packages and written as a docker-archive tar
(``manifest.json`` + config + one layer per step) that ``ctr images import`` reads; both are
cached under ``~/.cache/airflow-volcano-wandb/images`` by the hash of their inputs.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from airflow_volcano_wandb.testing.cluster import build

TRAINER_RECIPE = Path("docker", "trainer")
TRAINER_IMAGE = "avw-trainer:rootless"
#: The trainer's own files, copied into /app as the Dockerfile's ``COPY`` does.
TRAINER_FILES = (
    "launch.py",
    "train.py",
    "hyperparameters.py",
    "process_group.py",
    "wandb_run.py",
    "model.py",
    "training.py",
    "checkpoints.py",
    "resume.py",
    "checkpoint_artifact.py",
    "stopping.py",
)
PAUSE_IMAGE = "avw-pause:1"
SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-torch stands in for the Dockerfile's CPU wheel (see the module docstring).
DEBIAN_PACKAGES = ("python3", "python3-pip", "python3-torch", "ca-certificates")
TRAINER_UID = 1000
VERSIONS_CHECK = (
    "import torch, wandb; print('torch', torch.__version__, 'wandb', wandb.__version__)"
)
# A clean environment inside the root file system: the host's pip settings are not the image's.
CHROOT_ENV = {"PATH": "/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root"}
HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
TORCH_SPEC_PREFIXES = ("torch<", "torch>", "torch=", "torch!", "torch~")


def _say(message: str) -> None:
    build._say(f"[image] {message}")


def images_dir() -> Path:
    path = build.cache_root() / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


def trainer_dir() -> Path:
    """The trainer's recipe, ``docker/trainer`` of a checkout of the repo (no wheel holds it):
    the checkout this file is in (an editable install, under packages/pytest-volcano-cluster/),
    else the working directory (the wheels in a venv used from the repo root: make test-compat).
    """
    parents = Path(__file__).resolve().parents
    for root in (*parents[5:6], Path.cwd()):
        if (root / TRAINER_RECIPE).is_dir():
            return root / TRAINER_RECIPE
    raise FileNotFoundError(f"no {TRAINER_RECIPE}: build the trainer image in a checkout")


def pip_requirements() -> list[str]:
    """``requirements.txt`` without comments and without torch (Debian's is used)."""
    lines = (trainer_dir() / "requirements.txt").read_text().splitlines()
    specs = [line.split("#", 1)[0].strip() for line in lines]
    return [s for s in specs if s and not s.replace(" ", "").startswith(TORCH_SPEC_PREFIXES)]


def _digest(*parts: bytes) -> str:
    sha = hashlib.sha256()
    for part in parts:
        sha.update(hashlib.sha256(part).digest())
    return sha.hexdigest()[:12]


def _tar_dir(root: Path, out: Path) -> None:
    # --numeric-owner: the image's uids are the rootfs's, not this machine's names.
    subprocess.run(
        ["tar", "-C", str(root), "--numeric-owner", "--xattrs", "-cf", str(out), "."],
        check=True,
    )


def debian_rootfs(rootfs: Path, packages: tuple[str, ...]) -> None:
    """A minimal Debian ``SUITE`` root file system in ``rootfs`` with ``packages``."""
    subprocess.run(
        [
            "mmdebstrap",
            "--mode=root",
            "--variant=minbase",
            f"--include={','.join(packages)}",
            "--aptopt=APT::Install-Recommends false",
            SUITE,
            str(rootfs),
            MIRROR,
        ],
        check=True,
    )


def _base_layer(key: str) -> Path:
    """Debian + torch + the pip requirements, as one layer tar (the slow, cached part)."""
    layer = images_dir() / f"trainer-base-{key}.tar"
    if layer.exists():
        return layer
    started = time.monotonic()
    _say(f"building the trainer's base layer with mmdebstrap (first run only) -> {layer}")
    with tempfile.TemporaryDirectory(dir=images_dir()) as tmp:
        rootfs = Path(tmp) / "rootfs"
        debian_rootfs(rootfs, DEBIAN_PACKAGES)
        shutil.copy("/etc/resolv.conf", rootfs / "etc" / "resolv.conf")
        # The host's CA bundle, which may hold a proxy's CA Debian's does not; removed below.
        shutil.copy(HOST_CA_BUNDLE, rootfs / "tmp" / "host-ca.crt")
        subprocess.run(
            [
                "chroot",
                str(rootfs),
                "python3",
                "-m",
                "pip",
                "install",
                "--no-cache-dir",
                "--break-system-packages",
                "--cert=/tmp/host-ca.crt",
                *pip_requirements(),
            ],
            check=True,
            env=CHROOT_ENV,
        )
        with (rootfs / "etc" / "passwd").open("a") as passwd:
            passwd.write(f"trainer:x:{TRAINER_UID}:{TRAINER_UID}::/home/trainer:/bin/sh\n")
        with (rootfs / "etc" / "group").open("a") as group:
            group.write(f"trainer:x:{TRAINER_UID}:\n")
        (rootfs / "home" / "trainer").mkdir(parents=True, exist_ok=True)
        os.chown(rootfs / "home" / "trainer", TRAINER_UID, TRAINER_UID)
        (rootfs / "tmp" / "host-ca.crt").unlink()
        (rootfs / "etc" / "resolv.conf").write_text("")  # the kubelet mounts the pod's own
        for junk in ("var/cache/apt", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        check = subprocess.run(
            [
                "chroot",
                str(rootfs),
                "python3",
                "-c",
                VERSIONS_CHECK,
            ],
            check=True,
            capture_output=True,
            text=True,
            env=CHROOT_ENV,
        )
        _say(check.stdout.strip())
        partial = layer.with_suffix(".partial")
        _tar_dir(rootfs, partial)
        partial.rename(layer)
    seconds = time.monotonic() - started
    build_record(layer).write_text(json.dumps({"seconds": round(seconds, 1)}))
    _say(f"base layer built in {seconds:.0f}s")
    return layer


def build_record(base_layer: Path) -> Path:
    """Where the base layer's cold build time is kept (``bench/real_pods.py`` reports it)."""
    return base_layer.with_suffix(".json")


def base_layer_path() -> Path:
    """The cached base layer of the current recipe (whether or not it is built yet)."""
    return images_dir() / f"trainer-base-{_base_key()}.tar"


def _base_key() -> str:
    requirements = (trainer_dir() / "requirements.txt").read_bytes()
    return _digest(requirements, " ".join(DEBIAN_PACKAGES).encode(), SUITE.encode())


def _file_layer(files: dict[str, tuple[bytes, int]], uid: int = 0) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as tar:
        dirs = sorted({str(Path(name).parent) for name in files} - {"."})
        for name in dirs:
            info = tarfile.TarInfo(name)
            info.type, info.mode, info.uid, info.gid = tarfile.DIRTYPE, 0o755, uid, uid
            tar.addfile(info)
        for name, (data, mode) in sorted(files.items()):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.uid, info.gid = len(data), mode, uid, uid
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def write_docker_archive(
    out: Path, tag: str, layers: list[Path | bytes], config: dict[str, object]
) -> Path:
    """A docker-archive tar (what ``docker save`` writes) of ``layers``, bottom first."""
    partial = out.with_suffix(".partial")
    diff_ids, names = [], []
    with tarfile.open(partial, "w", format=tarfile.GNU_FORMAT) as archive:
        for layer in layers:
            sha = hashlib.sha256()
            if isinstance(layer, bytes):
                sha.update(layer)
            else:
                with layer.open("rb") as fh:
                    while chunk := fh.read(1 << 20):
                        sha.update(chunk)
            name = f"{sha.hexdigest()}/layer.tar"
            if isinstance(layer, bytes):
                info = tarfile.TarInfo(name)
                info.size = len(layer)
                archive.addfile(info, io.BytesIO(layer))
            else:
                archive.add(str(layer), arcname=name)
            diff_ids.append(f"sha256:{sha.hexdigest()}")
            names.append(name)
        image_config = json.dumps(
            {
                "architecture": "amd64",
                "os": "linux",
                "config": config,
                "rootfs": {"type": "layers", "diff_ids": diff_ids},
            }
        ).encode()
        config_name = f"{hashlib.sha256(image_config).hexdigest()}.json"
        manifest = json.dumps([{"Config": config_name, "RepoTags": [tag], "Layers": names}])
        for name, data in ((config_name, image_config), ("manifest.json", manifest.encode())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    partial.rename(out)
    return out


def trainer_image() -> Path:
    """The trainer image's docker-archive tar, built unless cached; returns its path."""
    base_key = _base_key()
    sources = {name: (trainer_dir() / name).read_bytes() for name in TRAINER_FILES}
    out = images_dir() / f"trainer-{_digest(base_key.encode(), *sources.values())}.tar"
    if out.exists():
        return out
    base = _base_layer(base_key)
    app = _file_layer({f"app/{name}": (data, 0o644) for name, data in sources.items()})
    config = {
        # The Dockerfile's ENV, WORKDIR, USER and ENTRYPOINT.
        "Env": [
            "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "PYTHONUNBUFFERED=1",
            "WANDB_DIR=/tmp",
        ],
        "WorkingDir": "/app",
        "User": str(TRAINER_UID),
        "Entrypoint": ["python3", "/app/launch.py"],
    }
    write_docker_archive(out, TRAINER_IMAGE, [base, app], config)
    for stale in images_dir().glob("trainer-*.tar"):  # 1.4 GB each: keep the newest only
        if stale not in (out, base) and not stale.name.startswith("trainer-base-"):
            stale.unlink()
    return out


def pause_image(pause_binary: Path) -> Path:
    """The pod sandbox image: one static binary that waits for a signal."""
    data = pause_binary.read_bytes()
    out = images_dir() / f"pause-{_digest(data)}.tar"
    if out.exists():
        return out
    layer = _file_layer({"pause": (data, 0o755)})
    return write_docker_archive(out, PAUSE_IMAGE, [layer], {"Entrypoint": ["/pause"]})

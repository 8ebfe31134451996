"""The real node's pure parts: placing a template on it, the image recipe and archive format."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import yaml

from airflow_volcano_wandb.testing.cluster import image, node, placement, wandb_offline

REPO = Path(__file__).resolve().parents[2]
TEMPLATE = REPO / "dags" / "templates" / "volcano-pytorch-queue-template.yaml"


def test_every_pod_of_a_placed_template_asks_for_the_real_node():
    template = yaml.safe_load(TEMPLATE.read_text())
    placed = placement.place_on_real_node(template)

    for task in placed["spec"]["tasks"]:
        pod = task["template"]["spec"]
        assert pod["nodeSelector"] == placement.REAL_NODE_SELECTOR
        assert placement.REAL_NODE_TOLERATION in pod["tolerations"]
        claim = {"claimName": placement.WANDB_CLAIM}
        assert {"name": "avw-wandb", "persistentVolumeClaim": claim} in pod["volumes"]
        for container in pod["containers"]:
            assert {"name": "WANDB_DIR", "value": placement.WANDB_MOUNT} in container["env"]
            assert {"name": "WANDB_MODE", "value": "offline"} in container["env"]
            assert {"name": "avw-wandb", "mountPath": placement.WANDB_MOUNT} in container[
                "volumeMounts"
            ]
    # The DAG's own template is left as it was.
    assert template == yaml.safe_load(TEMPLATE.read_text())


def test_the_node_taints_itself_with_what_the_placement_tolerates():
    (taint,) = node.kubelet_config(Path("/state"), 10250, 10248)["registerWithTaints"]
    toleration = placement.REAL_NODE_TOLERATION
    assert (taint["key"], taint["value"], taint["effect"]) == (
        toleration["key"],
        toleration["value"],
        toleration["effect"],
    )


def test_the_rootless_recipe_installs_the_dockerfiles_pip_requirements_but_torch():
    requirements = image.pip_requirements()
    assert any(r.startswith("wandb") for r in requirements)
    assert not any(r.replace(" ", "").startswith("torch") for r in requirements)
    # torch comes from Debian instead (the CPU wheel index is not reachable here).
    assert "python3-torch" in image.DEBIAN_PACKAGES


def test_the_rootless_recipe_copies_the_trainer_files_the_dockerfile_copies():
    """The trainer is more than one file (train.py imports its modules from beside itself): an
    image without one of them would fail only in a pod."""
    # A long COPY goes on over lines ending in a backslash: one instruction.
    dockerfile = (image.trainer_dir() / "Dockerfile").read_text().replace("\\\n", " ")
    copies = [line.split() for line in dockerfile.splitlines() if line.startswith("COPY ")]
    (copy,) = [words[1:-1] for words in copies if words[-1] == "/app/"]
    assert sorted(copy) == sorted(image.TRAINER_FILES)
    assert sorted(image.TRAINER_FILES) == sorted(p.name for p in image.trainer_dir().glob("*.py"))


def test_a_docker_archive_lists_its_layers_in_order_with_their_digests(tmp_path):
    base = tmp_path / "base.tar"
    with tarfile.open(base, "w") as tar:
        (tmp_path / "hello").write_text("hi")
        tar.add(tmp_path / "hello", arcname="hello")
    top = b"not really a tar, only bytes"
    out = image.write_docker_archive(
        tmp_path / "img.tar", "avw-test:1", [base, top], {"Entrypoint": ["/hello"]}
    )

    with tarfile.open(out) as archive:
        (manifest,) = json.load(archive.extractfile("manifest.json"))
        config = json.load(archive.extractfile(manifest["Config"]))
        layers = [archive.extractfile(name).read() for name in manifest["Layers"]]
    assert manifest["RepoTags"] == ["avw-test:1"]
    assert layers == [base.read_bytes(), top]
    assert config["config"] == {"Entrypoint": ["/hello"]}
    digests = [name.split("/")[0] for name in manifest["Layers"]]
    assert config["rootfs"]["diff_ids"] == [f"sha256:{d}" for d in digests]


def test_a_placed_template_meets_the_operators_default_pod_security_level():
    """The W&B files go through a claim: a ``hostPath`` in the pod would be refused."""
    from airflow_volcano_wandb.template.pod_security import DEFAULT_LEVEL, violations

    placed = placement.place_on_real_node(yaml.safe_load(TEMPLATE.read_text()))
    for task in placed["spec"]["tasks"]:
        assert task["template"]["spec"]["volumes"]  # what is checked below
        assert not violations(task["template"], (), DEFAULT_LEVEL)
        hostpath = {"name": "x", "hostPath": {"path": "/"}}
        task["template"]["spec"]["volumes"].append(hostpath)
        assert violations(task["template"], (), DEFAULT_LEVEL)  # the check does look


def _chunk(kind: int, payload: bytes) -> bytes:
    return wandb_offline.CHUNK_HEADER.pack(0, len(payload), kind) + payload


def test_run_file_records_are_read_whole_across_blocks_and_padding():
    header = b":W&B\xe1\xbe\x00"
    small = b"a" * 10
    # The second record starts in block 0 and ends in block 1; block 0 ends in padding bytes
    # too short for a chunk header.
    first_part = wandb_offline.BLOCK_BYTES - len(header) - 2 * 7 - len(small) - 3
    big = b"b" * first_part + b"c" * 100
    block0 = (
        header
        + _chunk(wandb_offline.FULL, small)
        + _chunk(wandb_offline.FIRST, big[:first_part])
        + b"\0" * 3
    )
    assert len(block0) == wandb_offline.BLOCK_BYTES
    data = block0 + _chunk(wandb_offline.LAST, big[first_part:]) + _chunk(wandb_offline.FULL, b"z")
    assert wandb_offline.records(data) == [small, big, b"z"]

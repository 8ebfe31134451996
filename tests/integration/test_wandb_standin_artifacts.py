"""The W&B stand-in keeps artifacts as W&B does, for the real ``wandb`` SDK of an online run.

An online run logs two versions of one artifact and reads ``:latest`` back, in a process of
its own (``wandb.init`` starts the SDK's ``wandb-core`` helper and changes the SDK's global
state, which the other tests in this process must not inherit). Every test name says "standin".
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_support.wandb_standin import WandbStandin
from test_support.wandb_support import API_KEY, ENTITY, PROJECT

RUN_ID = "artifactrun1"

# Logs v0 and v1 of "checkpoint-<run>" (a file each, metadata, aliases), then, with the file
# cache bypassed so the bytes come from the server, downloads :latest; prints what it saw.
_SCRIPT = """
import json, sys
from pathlib import Path
import wandb

work = Path(sys.argv[1])
run = wandb.init(entity=sys.argv[2], project=sys.argv[3], id=sys.argv[4])
logged = []
for step in (10, 20):
    source = work / f"saved-{step}.pt"
    source.write_bytes(f"checkpoint of step {step}".encode() * 1000)
    artifact = wandb.Artifact(f"checkpoint-{run.id}", type="model", metadata={"step": step})
    artifact.add_file(str(source), name=f"step-{step}.pt")
    run.log_artifact(artifact, aliases=["latest", f"step-{step}"]).wait(timeout=60)
    logged.append(artifact.qualified_name)
latest = run.use_artifact(f"checkpoint-{run.id}:latest")
root = Path(latest.download(root=str(work / "downloaded"), skip_cache=True))
missing = None
try:
    run.use_artifact("never-logged:latest")
except wandb.errors.CommError as error:
    missing = type(error.exc).__name__
run.finish()
print("RESULT " + json.dumps({
    "logged": logged,
    "latest": latest.version,
    "metadata": latest.metadata,
    "type": latest.type,
    "files": sorted(p.name for p in root.iterdir()),
    "missing": missing,
}))
"""


def test_standin_keeps_logged_artifact_versions_for_download(tmp_path: Path) -> None:
    with WandbStandin(api_key=API_KEY) as standin:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("WANDB_")},
            "WANDB_BASE_URL": standin.url,
            "WANDB_API_KEY": API_KEY,
            "WANDB_MODE": "online",
            "WANDB_SILENT": "true",
            "WANDB_DIR": str(tmp_path),
            "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config"),
            "WANDB_CACHE_DIR": str(tmp_path / "wandb-cache"),
            "WANDB_DATA_DIR": str(tmp_path / "wandb-data"),
        }
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(tmp_path), ENTITY, PROJECT, RUN_ID],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        output = done.stdout + done.stderr
        assert done.returncode == 0, output[-4000:]
        versions = standin.logged_versions(ENTITY, PROJECT, f"checkpoint-{RUN_ID}")
        downloads = [r.path for r in standin.requests if r.path.endswith("/files/step-20.pt")]
        uses = [r.variables for r in standin.requests if r.operation == "UseArtifact"]
        unsupported = [
            op for op in standin.operations() if op and not hasattr(standin, f"_op_{op}")
        ]
    result = json.loads(output.split("RESULT ", 1)[1].splitlines()[0])
    name = f"{ENTITY}/{PROJECT}/checkpoint-{RUN_ID}"
    assert result["logged"] == [f"{name}:v0", f"{name}:v1"]
    assert result["latest"] == "v1"
    assert result["metadata"] == {"step": 20} and result["type"] == "model"
    assert result["files"] == ["step-20.pt"]
    downloaded = (tmp_path / "downloaded" / "step-20.pt").read_bytes()
    assert downloaded == (tmp_path / "saved-20.pt").read_bytes()
    assert result["missing"] == "ValueError"  # what the SDK raises for "no such artifact"
    # Stored as committed, each alias on one version only; the file came from the stand-in.
    assert [(v.version, v.state, v.aliases) for v in versions] == [
        (0, "COMMITTED", ["step-10"]),
        (1, "COMMITTED", ["latest", "step-20"]),
    ]
    assert [json.loads(v.metadata) for v in versions] == [{"step": 10}, {"step": 20}]
    assert versions[1].files["step-20.pt"] == downloaded
    assert len(downloads) == 2  # the upload's PUT and the download's GET
    assert [(u["artifactID"], u["runName"]) for u in uses] == [(versions[1].artifact_id, RUN_ID)]
    assert not [op for op in unsupported if "Artifact" in op], unsupported

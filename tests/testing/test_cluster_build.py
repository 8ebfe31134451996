"""The local cluster's binaries are built once, however many processes ask for them at once."""

from __future__ import annotations

import os
import subprocess
import sys

# The real node's pause program: the smallest component (no dependencies), so the real
# `go build` runs in seconds.
_BUILD_ONE = (
    "from airflow_volcano_wandb.testing.cluster import build; "
    "print(build.build_component(next(c for c in build.NODE_COMPONENTS if c.name == 'pause')))"
)


def test_two_processes_building_the_same_binary_build_it_once(tmp_path):
    env = {**os.environ, "AVW_CACHE_DIR": str(tmp_path)}
    builders = [
        subprocess.Popen(
            [sys.executable, "-c", _BUILD_ONE],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outputs = [builder.communicate(timeout=600) for builder in builders]
    assert [builder.returncode for builder in builders] == [0, 0], outputs
    paths = {stdout.strip() for stdout, _ in outputs}
    assert len(paths) == 1 and os.access(paths.pop(), os.X_OK)
    builds = sum(stderr.count("[cluster] building pause") for _, stderr in outputs)
    assert builds == 1, outputs

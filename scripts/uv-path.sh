#!/usr/bin/env bash
# Print the path of a uv executable, installing one first if needed, without touching the
# system interpreter: Debian marks its Python "externally managed" (PEP 668), so
# `python3 -m pip install uv` is refused. uv is taken from PATH, else from a small bootstrap
# venv of our own under the user cache (created once with `python -m venv`, uv pip-installed
# into it). Exits non-zero when uv cannot be had (e.g. no python venv module, no PyPI).
#
# usage: scripts/uv-path.sh [PYTHON]   (default python3.11)
set -euo pipefail

PY=${1:-python3.11}
BOOTSTRAP=${AVW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-volcano-wandb}/bootstrap

if command -v uv >/dev/null; then
    command -v uv
    exit 0
fi
if [[ ! -x $BOOTSTRAP/bin/uv ]]; then
    echo "bootstrap: installing uv into $BOOTSTRAP (first run only)" >&2
    "$PY" -m venv --clear "$BOOTSTRAP" >&2
    "$BOOTSTRAP/bin/python" -m pip install -q --disable-pip-version-check uv >&2
fi
echo "$BOOTSTRAP/bin/uv"

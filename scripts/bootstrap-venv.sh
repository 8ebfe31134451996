#!/usr/bin/env bash
# Create the project virtualenv without touching the system interpreter (PEP 668): with uv
# (scripts/uv-path.sh finds or bootstraps it), or, when uv cannot be had, with plain
# `python -m venv` + pip.
#
# usage: scripts/bootstrap-venv.sh PYTHON VENV_DIR EXTRAS   (e.g. python3.11 .venv dev,testing)
set -euo pipefail

PY=${1:?python interpreter}
VENV=${2:?venv directory}
EXTRAS=${3:?extras}

if UV=$("$(dirname "$0")/uv-path.sh" "$PY"); then
    "$UV" venv -q --allow-existing -p "$PY" "$VENV"
    VIRTUAL_ENV=$PWD/$VENV "$UV" pip install -q -e ".[$EXTRAS]"
else
    echo "bootstrap: uv unavailable, falling back to $PY -m venv + pip (slower)" >&2
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
fi

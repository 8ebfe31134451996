#!/usr/bin/env bash
# Create the project virtualenv without touching the system interpreter.
#
# Debian marks its Python "externally managed" (PEP 668), so `python3 -m pip install uv` is
# refused. uv is taken from PATH, else from a small bootstrap venv of our own under the user
# cache (created once with `python -m venv`, uv pip-installed into it); if even that fails
# (e.g. no PyPI access for uv), the venv is built with plain `python -m venv` + pip.
#
# usage: scripts/bootstrap-venv.sh PYTHON VENV_DIR EXTRAS   (e.g. python3.11 .venv dev,testing)
set -euo pipefail

PY=${1:?python interpreter}
VENV=${2:?venv directory}
EXTRAS=${3:?extras}
BOOTSTRAP=${AVW_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/airflow-volcano-wandb}/bootstrap

find_uv() {
    if command -v uv >/dev/null; then
        command -v uv
        return 0
    fi
    if [[ ! -x $BOOTSTRAP/bin/uv ]]; then
        echo "bootstrap: installing uv into $BOOTSTRAP (first run only)" >&2
        "$PY" -m venv --clear "$BOOTSTRAP" >&2 &&
            "$BOOTSTRAP/bin/python" -m pip install -q --disable-pip-version-check uv >&2 ||
            return 1
    fi
    echo "$BOOTSTRAP/bin/uv"
}

if UV=$(find_uv); then
    "$UV" venv -q --allow-existing -p "$PY" "$VENV"
    VIRTUAL_ENV=$PWD/$VENV "$UV" pip install -q -e ".[$EXTRAS]"
else
    echo "bootstrap: uv unavailable, falling back to $PY -m venv + pip (slower)" >&2
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".[$EXTRAS]"
fi

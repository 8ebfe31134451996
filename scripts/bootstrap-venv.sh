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
# The local cluster's distribution (the `testing` extra names it) is in this repo, not on a
# registry: installed editable beside the provider. Both fill the one package
# airflow_volcano_wandb, so both are installed as plain source paths on sys.path
# (editable_mode=compat): setuptools' default import-hook finders would let the harness's
# half of the package shadow the provider's __init__ (it then imports as a bare namespace
# package), while with plain paths the provider's regular package is found first and its
# pkgutil.extend_path adds the harness's airflow_volcano_wandb/testing.
HARNESS=packages/pytest-volcano-cluster
# Reinstalled each time: a venv made before this layout holds them as import-hook finders.
EDITABLE=(--config-settings editable_mode=compat -e ".[$EXTRAS]" -e "$HARNESS")

if UV=$("$(dirname "$0")/uv-path.sh" "$PY"); then
    "$UV" venv -q --allow-existing -p "$PY" "$VENV"
    VIRTUAL_ENV=$PWD/$VENV "$UV" pip install -q --reinstall-package airflow-volcano-wandb \
        --reinstall-package pytest-volcano-cluster "${EDITABLE[@]}"
else
    echo "bootstrap: uv unavailable, falling back to $PY -m venv + pip (slower)" >&2
    "$PY" -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${EDITABLE[@]}"
fi

#!/usr/bin/env bash
# Check the artifact, not the checkout: build the sdist and wheel, install the WHEEL into a
# fresh venv (no editable install) and, from a temporary directory so the repo is not on
# sys.path, check what a user of `pip install airflow-volcano-wandb` gets: the provider entry
# point and its info, the wandb connection type, the example DAGs parsing, the local-cluster
# CLI and its package data. With AVW_CLUSTER_STATE_DIR naming a running local cluster, also
# run `doctor` and the manual example DAG (`airflow dags test`, via scripts/demo.py) on it.
#
# usage: scripts/check-wheel.sh [PYTHON]   (default python3.11)
set -euo pipefail

PY=${1:-python3.11}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d -t avw-check-wheel-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
say() { echo "check-wheel: $*"; }

UV=$("$REPO/scripts/uv-path.sh" "$PY")
say "building sdist and wheel"
"$UV" build -q --python "$PY" --out-dir "$WORK/dist" "$REPO"
WHEEL=$(echo "$WORK"/dist/*.whl)
[[ -f $WHEEL && -f $(echo "$WORK"/dist/*.tar.gz) ]] || { say "FAILED: no wheel/sdist"; exit 1; }

say "installing $(basename "$WHEEL") into a fresh venv"
"$UV" venv -q -p "$PY" "$WORK/venv"
"$UV" pip install -q --python "$WORK/venv/bin/python" "$WHEEL"
PYTHON=$WORK/venv/bin/python

# The example DAGs as a user copies them: each with the templates/ folder it names relative
# to its own file (Jinja's search path is the DAG file's folder).
cp -r "$REPO/dags" "$WORK/dags"
mkdir "$WORK/run"
cd "$WORK/run"
export AIRFLOW_HOME=$WORK/airflow
export AIRFLOW__CORE__DAGS_FOLDER=$WORK/dags
export AIRFLOW__CORE__LOAD_EXAMPLES=False
unset PYTHONPATH AIRFLOW_CONN_KUBERNETES_DEFAULT AIRFLOW_CONN_WANDB_DEFAULT

"$PYTHON" - "$WORK/dags" <"$REPO/scripts/check_installed.py"

# Into a file, not a pipe: `grep -q` closing the pipe early would fail the run under pipefail.
"$PYTHON" -m airflow providers hooks -o plain >"$WORK/hooks.out"
grep -q "^wandb\b" "$WORK/hooks.out" ||
    { say "FAILED: 'airflow providers hooks' does not list wandb"; exit 1; }
say "ok: 'airflow providers hooks' lists the wandb connection type"

# `status` of a dir without a cluster must run (exit 1: not running), proving the CLI
# imports from the wheel; a real cluster is checked below.
set +e
"$PYTHON" -m airflow_volcano_wandb.testing.cluster status --state-dir "$WORK/no-cluster" >"$WORK/status.out"
status=$?
set -e
[[ $status == 1 ]] && grep -q "running   : False" "$WORK/status.out" ||
    { cat "$WORK/status.out"; say "FAILED: cluster status (exit $status)"; exit 1; }
say "ok: python -m airflow_volcano_wandb.testing.cluster status runs"

CLUSTER=${AVW_CLUSTER_STATE_DIR:-}
if [[ -z $CLUSTER ]]; then
    say "AVW_CLUSTER_STATE_DIR not set: skipping doctor and the example DAG on a cluster"
    say "all checks passed"
    exit 0
fi
CLUSTER=$(cd "$REPO" && realpath "$CLUSTER")
"$PYTHON" -m airflow_volcano_wandb.testing.cluster status --state-dir "$CLUSTER" >/dev/null ||
    { say "FAILED: AVW_CLUSTER_STATE_DIR=$CLUSTER is not a running cluster"; exit 1; }

say "doctor against the cluster in $CLUSTER"
AIRFLOW_CONN_KUBERNETES_DEFAULT="{\"conn_type\": \"kubernetes\", \"extra\": {\"kube_config_path\": \"$CLUSTER/kubeconfig\"}}" \
    WANDB_MODE=offline "$PYTHON" -m airflow_volcano_wandb doctor --namespace default

say "airflow dags test volcano_pytorch_manual against the cluster"
"$PYTHON" "$REPO/scripts/demo.py" --cluster-dir "$CLUSTER" --state-dir "$WORK/state" \
    --dags-folder "$WORK/dags" ||
    { tail -50 "$WORK/state/demo-dags-test.log"; say "FAILED: the example DAG run"; exit 1; }
say "all checks passed"

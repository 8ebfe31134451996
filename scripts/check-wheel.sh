#!/usr/bin/env bash
# Check the artifacts, not the checkout: build the sdists and wheels of the provider and of the
# local cluster (pytest-volcano-cluster), and prove from its file list that the provider's wheel
# holds the provider alone: no airflow_volcano_wandb/testing/** and no pytest11 entry point.
# Then install the provider's WHEEL alone into a fresh venv (no editable install) and, from a
# temporary directory so the repo is not on sys.path, check what a user of
# `pip install airflow-volcano-wandb` gets: the provider entry point and its info, the wandb
# connection type, the example DAGs parsing, and no test harness. Then add the cluster's wheel
# and check its CLI, package data and fixture. With AVW_CLUSTER_STATE_DIR naming a running
# local cluster, also run `doctor` and the manual example DAG (`airflow dags test`, via
# scripts/demo.py) on it.
#
# usage: scripts/check-wheel.sh [PYTHON]   (default python3.11)
set -euo pipefail

PY=${1:-python3.11}
REPO=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d -t avw-check-wheel-XXXXXX)
trap 'rm -rf "$WORK"' EXIT
say() { echo "check-wheel: $*"; }
fail() { say "FAILED: $*"; exit 1; }

UV=$("$REPO/scripts/uv-path.sh" "$PY")
say "building the sdists and wheels"
"$UV" build -q --python "$PY" --out-dir "$WORK/dist" "$REPO"
"$UV" build -q --python "$PY" --out-dir "$WORK/dist" "$REPO/packages/pytest-volcano-cluster"
WHEEL=$(echo "$WORK"/dist/airflow_volcano_wandb-*.whl)
HARNESS_WHEEL=$(echo "$WORK"/dist/pytest_volcano_cluster-*.whl)
for artifact in "$WHEEL" "$HARNESS_WHEEL" "$WORK"/dist/{airflow_volcano_wandb,pytest_volcano_cluster}-*.tar.gz; do
    [[ -f $artifact ]] || fail "missing $artifact"
done

# What each wheel holds, from its own file list (and entry_points.txt), into files: `grep -q`
# closing a pipe early would fail the run under pipefail.
list_wheel() {
    "$PY" -c 'import sys, zipfile; print("\n".join(zipfile.ZipFile(sys.argv[1]).namelist()))' "$1"
}
entry_points() {
    "$PY" -c 'import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
print("".join(z.read(n).decode() for n in z.namelist() if n.endswith(".dist-info/entry_points.txt")))' "$1"
}
list_wheel "$WHEEL" >"$WORK/provider-files.txt"
entry_points "$WHEEL" >"$WORK/provider-entry-points.txt"
say "$(basename "$WHEEL") holds $(wc -l <"$WORK/provider-files.txt") files:"
sed 's/^/    /' "$WORK/provider-files.txt"
say "and these entry points:"
sed 's/^/    /' "$WORK/provider-entry-points.txt"
grep -qx "airflow_volcano_wandb/__init__.py" "$WORK/provider-files.txt" ||
    fail "the provider's wheel has no airflow_volcano_wandb/__init__.py (is the list read?)"
if grep "^airflow_volcano_wandb/testing/" "$WORK/provider-files.txt"; then
    fail "the provider's wheel holds the test harness (the files above)"
fi
grep -q "^\[apache_airflow_provider\]" "$WORK/provider-entry-points.txt" ||
    fail "the provider's wheel has no apache_airflow_provider entry point"
if grep -q "^\[pytest11\]" "$WORK/provider-entry-points.txt"; then
    fail "the provider's wheel registers a pytest11 entry point"
fi
say "ok: the provider's wheel holds no airflow_volcano_wandb/testing/** and no pytest11 entry point"

# What a company checks before adopting it: the license (the file and its SPDX expression in the
# metadata), the changelog and the security note, in the wheel and in the sdist alike.
grep -qx "airflow_volcano_wandb-[^/]*\.dist-info/licenses/LICENSE" "$WORK/provider-files.txt" ||
    fail "the provider's wheel has no .dist-info/licenses/LICENSE"
for doc in CHANGELOG.md SECURITY.md; do
    grep -qx "airflow_volcano_wandb-[^/]*\.data/data/share/doc/airflow-volcano-wandb/$doc" \
        "$WORK/provider-files.txt" || fail "the provider's wheel has no share/doc/.../$doc"
done
"$PY" - "$WHEEL" "$REPO" <<'PYEOF' || fail "the wheel's LICENSE or license metadata is not the repo's"
import sys, zipfile
from pathlib import Path
wheel, repo = zipfile.ZipFile(sys.argv[1]), Path(sys.argv[2])
names = wheel.namelist()
(metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
(license_,) = [n for n in names if n.endswith(".dist-info/licenses/LICENSE")]
assert "License-Expression: Apache-2.0" in wheel.read(metadata).decode().splitlines()
assert wheel.read(license_) == (repo / "LICENSE").read_bytes()
PYEOF
SDIST=$(echo "$WORK"/dist/airflow_volcano_wandb-*.tar.gz)
"$PY" -c 'import sys, tarfile; print("\n".join(tarfile.open(sys.argv[1]).getnames()))' "$SDIST" \
    >"$WORK/sdist-files.txt"
for doc in LICENSE CHANGELOG.md SECURITY.md; do
    grep -qx "airflow_volcano_wandb-[^/]*/$doc" "$WORK/sdist-files.txt" ||
        fail "the provider's sdist has no $doc"
done
say "ok: LICENSE (Apache-2.0, as License-Expression), CHANGELOG.md and SECURITY.md in the wheel and the sdist"

list_wheel "$HARNESS_WHEEL" >"$WORK/harness-files.txt"
entry_points "$HARNESS_WHEEL" >"$WORK/harness-entry-points.txt"
# Installed over the provider, it must not replace the provider's files.
if grep -v -e "^airflow_volcano_wandb/testing/" -e "^pytest_volcano_cluster-.*\.dist-info/" \
    "$WORK/harness-files.txt"; then
    fail "the cluster's wheel holds files outside airflow_volcano_wandb/testing/ (above)"
fi
grep -qx "volcano_cluster = airflow_volcano_wandb.testing.pytest_plugin" \
    "$WORK/harness-entry-points.txt" || fail "the cluster's wheel has no volcano_cluster plugin"
say "ok: $(basename "$HARNESS_WHEEL") holds airflow_volcano_wandb/testing/** alone and the plugin"

say "installing $(basename "$WHEEL") alone into a fresh venv"
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

"$PYTHON" - provider "$WORK/dags" <"$REPO/scripts/check_installed.py"

# Into a file, not a pipe: `grep -q` closing the pipe early would fail the run under pipefail.
"$PYTHON" -m airflow providers hooks -o plain >"$WORK/hooks.out"
grep -q "^wandb\b" "$WORK/hooks.out" || fail "'airflow providers hooks' does not list wandb"
say "ok: 'airflow providers hooks' lists the wandb connection type"

say "adding $(basename "$HARNESS_WHEEL")"
"$UV" pip install -q --python "$PYTHON" "$HARNESS_WHEEL"
"$PYTHON" - cluster <"$REPO/scripts/check_installed.py"

# `status` of a dir without a cluster must run (exit 1: not running), proving the CLI
# imports from the wheel; a real cluster is checked below.
set +e
"$PYTHON" -m airflow_volcano_wandb.testing.cluster status --state-dir "$WORK/no-cluster" >"$WORK/status.out"
status=$?
set -e
[[ $status == 1 ]] && grep -q "running   : False" "$WORK/status.out" ||
    { cat "$WORK/status.out"; fail "cluster status (exit $status)"; }
say "ok: python -m airflow_volcano_wandb.testing.cluster status runs"

CLUSTER=${AVW_CLUSTER_STATE_DIR:-}
if [[ -z $CLUSTER ]]; then
    say "AVW_CLUSTER_STATE_DIR not set: skipping doctor and the example DAG on a cluster"
    say "all checks passed"
    exit 0
fi
CLUSTER=$(cd "$REPO" && realpath "$CLUSTER")
"$PYTHON" -m airflow_volcano_wandb.testing.cluster status --state-dir "$CLUSTER" >/dev/null ||
    fail "AVW_CLUSTER_STATE_DIR=$CLUSTER is not a running cluster"

say "doctor against the cluster in $CLUSTER"
AIRFLOW_CONN_KUBERNETES_DEFAULT="{\"conn_type\": \"kubernetes\", \"extra\": {\"kube_config_path\": \"$CLUSTER/kubeconfig\"}}" \
    WANDB_MODE=offline "$PYTHON" -m airflow_volcano_wandb doctor --namespace default

say "airflow dags test volcano_pytorch_manual against the cluster"
"$PYTHON" "$REPO/scripts/demo.py" --cluster-dir "$CLUSTER" --state-dir "$WORK/state" \
    --dags-folder "$WORK/dags" ||
    { tail -50 "$WORK/state/demo-dags-test.log"; fail "the example DAG run"; }
say "all checks passed"
